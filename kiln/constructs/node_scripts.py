"""Scripts a platform runs on its nodes without a check of kiln's, deployed where only the stack writes them.

ParallelCluster's OnNodeConfigured script and HyperPod's lifecycle scripts run as root on every node, fetched from
S3 by the platform, which checks nothing. CDK's asset bucket is shared by every stack of the account and region, and
whoever may publish assets may overwrite its objects, so such scripts are copied at each deploy by the stack's
BucketDeployment into a bucket of the cluster's own. Its bucket policy refuses object writes under their prefix to
every principal but the deployment's handler role (aws:PrincipalArn is the role's ARN for a role's sessions:
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-principalarn;
an explicit Deny in a resource policy overrides any Allow:
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment
from constructs import Construct

from kiln.constructs import acknowledgements
from kiln.constructs.children import parent_of
from kiln.constructs.review import acknowledge, acknowledge_wildcards

# The object writes the bucket policy leaves to the deployment alone: s3:PutObject covers PutObject, CopyObject and
# multipart uploads (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html).
WRITE_ACTIONS = ("s3:PutObject",)
DENY_SID = "OnlyTheDeploymentWritesNodeScripts"


def deploy_node_scripts(
    scope: Construct,
    construct_id: str,
    *,
    bucket: s3.IBucket,
    prefix: str,
    sources: Sequence[s3_deployment.ISource],
    source_bucket: s3.IBucket | None = None,
) -> s3_deployment.BucketDeployment:
    """Copy SOURCES under PREFIX of BUCKET at each deploy, and let no one but the copying handler write there.

    SOURCE_BUCKET: a bucket of the user's that SOURCES read from (a staged zip); default none (CDK assets only).
    BUCKET takes the deny in its policy when the app made it; an imported bucket keeps whatever policy it has.
    """
    deployment = s3_deployment.BucketDeployment(
        scope,
        construct_id,
        destination_bucket=bucket,
        destination_key_prefix=prefix,
        sources=list(sources),
        retain_on_delete=False,
    )
    handler = parent_of(deployment.handler_role, lambda_.Function)
    acknowledge(handler, acknowledgements.LIFECYCLE_HANDLER_LOGS, acknowledgements.LIFECYCLE_HANDLER_RUNTIME)
    acknowledge_wildcards(
        handler,
        acknowledgements.LIFECYCLE_HANDLER_GRANTS,
        # Without a bucket of the user's, its grant has nothing to cover: the destination stands in for it.
        source_bucket=(source_bucket or bucket).bucket_arn,
        lifecycle_bucket=bucket.bucket_arn,
    )
    bucket.add_to_resource_policy(
        iam.PolicyStatement(
            sid=DENY_SID,
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=list(WRITE_ACTIONS),
            resources=[bucket.arn_for_objects(f"{prefix}*")],
            conditions={"ArnNotEquals": {"aws:PrincipalArn": deployment.handler_role.role_arn}},
        )
    )
    return deployment
