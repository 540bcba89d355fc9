"""How operators and kiln reach a node: SSM Agent's own permissions for Session Manager and Run Command, no more."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from kiln.constructs import acknowledgements


def ssm_agent_statements(scope: IConstruct) -> list[iam.PolicyStatement]:
    """Return what a node's SSM Agent needs to register, hold sessions and take Run Command documents, in SCOPE's stack.

    In place of AmazonSSMManagedInstanceCore, whose 14 other actions (SSM parameters, documents, associations,
    inventory, patching) no kiln node uses. Review the wildcards with acknowledgements.NODE_SSM_GRANTS.
    """
    instances = Stack.of(scope).format_arn(service="ec2", resource="instance", resource_name="*")
    return [
        iam.PolicyStatement(actions=list(acknowledgements.NODE_SSM_HEARTBEAT), resources=[instances]),
        iam.PolicyStatement(actions=list(acknowledgements.NODE_SSM_CHANNELS), resources=["*"]),
    ]
