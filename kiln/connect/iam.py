"""The least an AWS identity needs for `kiln connect`: the policy the README shows, as data the tests hold to the calls.

Each grant says which platforms need it and who makes the call: kiln itself (boto3), the AWS CLI that kiln runs
(`aws ssm start-session` is ssm:StartSession on the target and on the session document), or the Session Manager
plugin the CLI runs (it opens the session's data channel, resumes a dropped session and ends it when it exits).
`aws eks get-token` (the kubeconfig's user) signs sts:GetCallerIdentity, which needs no permission; kubectl's own
calls are Kubernetes's to allow (an EKS access entry), not IAM's.

Placeholders in the rendered policy: REGION, ACCOUNT, CLUSTER (the spec's name), PCS_LOGIN_NODE_GROUP_ID (output
PcsLoginNodeGroupId of CLUSTER-compute), HYPERPOD_CLUSTER_ID (the last part of its output HyperPodClusterArn) and
SESSION_KEY_ARN (its output SessionKeyArn, with spec session_logs).

With spec session_logs the shell names the cluster's own Session document (kiln-CLUSTER-session), which logs it and
encrypts it with the cluster's session key: the identity needs ssm:StartSession on that document instead of the
account's SSM-SessionManagerRunShell, and kms:GenerateDataKey on the key, which the Session Manager plugin calls to
make the session's data key (the nodes decrypt it). Every ssm:StartSession statement carries the condition
ssm:SessionDocumentAccessCheck, so a session that names no document needs SSM-SessionManagerRunShell granted
outright; without it any identity allowed a target could open an unlogged shell there by leaving --document-name out.

Sources (AWS's):
- Actions, resource types and condition keys: the Service Authorization Reference, Systems Manager
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html (StartSession on
  instance and document, condition key ssm:resourceTag/${TagKey}; TerminateSession and ResumeSession on session, with
  ssm:resourceTag/aws:ssmmessages:session-id), Message Gateway Service
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonmessagegatewayservice.html
  (OpenDataChannel: no resource type, so "*"), CloudFormation (DescribeStacks on stack), EC2 (DescribeInstances: no
  resource type), SageMaker (ListClusterNodes on cluster) and EKS (DescribeCluster on cluster).
- Session documents in policies, the default shell's SSM-SessionManagerRunShell (the account's own) and AWS's
  documents (no account in their ARN):
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-specify-session-document.html and
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-default-session-document.html
- The end user's data channel (ssmmessages:OpenDataChannel) and own sessions:
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-quickstart.html and
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-restrict-access-examples.html
  (Example 4, AWS's aws:ssmmessages:session-id tag on each session: the quickstart's session/${aws:userid}-* ARN
  never matches an assumed role's sessions, whose ids start with the role session name; kiln.constructs.ci_identity
  grants the same).
- Tag conditions on ssm:StartSession (ssm:resourceTag/...): the examples page above, Example 3.
- HyperPod nodes as session targets, named by their cluster's ARN:
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites-iam.html
- Encrypted sessions: whoever starts one needs kms:GenerateDataKey on the document's kmsKeyId
  https://docs.aws.amazon.com/systems-manager/latest/userguide/session-preferences-enable-encryption.html (and the
  quickstart's end-user policies above); the plugin makes that call (KMSGenerateDataKey in
  https://github.com/aws/session-manager-plugin/blob/0bf03724309ca01f909e8c26a20313c2ee0fb1f7/src/encryption/encrypter.go).
- The session document check: the condition BoolIfExists ssm:SessionDocumentAccessCheck "true", in every statement
  that allows ssm:StartSession,
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-sessiondocumentaccesscheck.html and
  https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-specify-session-document.html

Notes: the Service Authorization Reference lists only instance, managed-instance, document and task as StartSession's
resource types, while HyperPod's guide grants it on the cluster's ARN; kiln follows HyperPod's guide (as `kiln ci
identity` does). The quickstart scopes ssmmessages:OpenDataChannel to session/${aws:userid}-*, the Service
Authorization Reference gives it no resource type and the default-session-document page grants it on "*": kiln
grants "*", which works for assumed roles too (the session is still only the caller's: opening its channel needs the
token StartSession returned).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from kiln.aws.remote.nodes import (
    PARALLELCLUSTER_HEAD_NODE,
    PARALLELCLUSTER_LOGIN_NODE,
    PARALLELCLUSTER_NAME_TAG,
    PARALLELCLUSTER_NODE_TYPE_TAG,
    PCS_NODE_GROUP_TAG,
)
from kiln.catalog.platforms import service_fact
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP
from kiln.contracts.ssm_documents import (
    DEFAULT_SHELL_DOCUMENT,
    LOCAL_PORT_FORWARD_DOCUMENT,
    PORT_FORWARD_DOCUMENT,
    session_document,
)
from kiln.contracts.tags import TAG_EKS_CLUSTER, TAG_NODE_GROUP

# The platforms kiln connect tells apart; Kubernetes covers EKS and HyperPod orchestrated by EKS (both reach
# code-server through the EKS cluster's API).
Platform = Literal["pcs", "parallelcluster", "hyperpod-slurm", "kubernetes"]
PLATFORMS: tuple[Platform, ...] = ("pcs", "parallelcluster", "hyperpod-slurm", "kubernetes")
Caller = Literal["kiln", "aws ssm start-session", "session-manager-plugin"]
KILN: Caller = "kiln"
CLI: Caller = "aws ssm start-session"
PLUGIN: Caller = "session-manager-plugin"
EC2_NODES = "arn:aws:ec2:REGION:ACCOUNT:instance/*"
# The platforms whose nodes users reach through a Session Manager shell: where spec session_logs takes effect.
SHELL_PLATFORMS: tuple[Platform, ...] = ("pcs", "parallelcluster", "hyperpod-slurm")
_SESSION_LOGGING = service_fact("systems_manager", "session_logging").value
# In every statement that allows ssm:StartSession: a session must be granted its document outright, the default
# shell's included (platforms.json, systems_manager.session_logging user_condition).
DOCUMENT_CHECK: dict[str, dict[str, str]] = _SESSION_LOGGING["user_condition"]


@dataclass(frozen=True)
class Grant:
    """One statement of the policy: the actions CALLS names (each with who makes it) on RESOURCES, under CONDITION,
    for PLATFORMS."""

    sid: str
    calls: dict[str, tuple[Caller, ...]]
    resources: tuple[str, ...]
    platforms: tuple[Platform, ...]
    why: str
    condition: dict[str, dict[str, Any]] = field(default_factory=dict)
    # None: every cluster needs it; True: only a cluster with spec session_logs; False: only one without.
    session_logs: bool | None = None

    @property
    def actions(self) -> tuple[str, ...]:
        """Return the grant's actions, sorted."""
        return tuple(sorted(self.calls))

    def statement(self) -> dict[str, Any]:
        """Return the grant as an IAM policy statement."""
        statement: dict[str, Any] = {
            "Sid": self.sid,
            "Effect": "Allow",
            "Action": self.actions[0] if len(self.actions) == 1 else list(self.actions),
            "Resource": list(self.resources) if len(self.resources) > 1 else self.resources[0],
        }
        if self.condition:
            statement["Condition"] = self.condition
        return statement


def _document(name: str) -> str:
    """Return the ARN of session document NAME in a policy: AWS's documents have no account in theirs."""
    account = "" if name.startswith("AWS-") else "ACCOUNT"
    return f"arn:aws:ssm:REGION:{account}:document/{name}"


def _starts(condition: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Return CONDITION with the session document check, for a statement that allows ssm:StartSession."""
    return {**(condition or {}), **DOCUMENT_CHECK}


GRANTS: tuple[Grant, ...] = (
    Grant(
        sid="ReadTheComputeStack",
        calls={"cloudformation:DescribeStacks": (KILN,)},
        resources=("arn:aws:cloudformation:REGION:ACCOUNT:stack/CLUSTER-compute/*",),
        platforms=PLATFORMS,
        why="the compute stack's outputs name the cluster, its backend and its node groups",
    ),
    Grant(
        sid="FindTheNodes",
        calls={"ec2:DescribeInstances": (KILN,)},
        resources=("*",),
        platforms=("pcs", "parallelcluster", "kubernetes"),
        why="the running login or head nodes by their tags (with a private EKS endpoint, a system node); EC2 has no "
        "resource type for it",
    ),
    Grant(
        sid="FindTheHyperPodNodes",
        calls={"sagemaker:ListClusterNodes": (KILN,)},
        resources=("arn:aws:sagemaker:REGION:ACCOUNT:cluster/HYPERPOD_CLUSTER_ID",),
        platforms=("hyperpod-slurm",),
        why="the running nodes of the login or controller instance group",
    ),
    Grant(
        sid="ReadTheEksCluster",
        calls={"eks:DescribeCluster": (KILN,)},
        resources=("arn:aws:eks:REGION:ACCOUNT:cluster/CLUSTER",),
        platforms=("kubernetes",),
        why="the API endpoint and certificate authority for the kubeconfig kiln writes",
    ),
    Grant(
        sid="SessionsOnPcsLoginNodes",
        calls={"ssm:StartSession": (CLI,)},
        resources=(EC2_NODES,),
        platforms=("pcs",),
        why="instances of the cluster's login node group, by the tag PCS gives them (no user can set an aws: tag)",
        condition=_starts({"StringEquals": {f"ssm:resourceTag/{PCS_NODE_GROUP_TAG}": "PCS_LOGIN_NODE_GROUP_ID"}}),
    ),
    Grant(
        sid="SessionsOnParallelClusterNodes",
        calls={"ssm:StartSession": (CLI,)},
        resources=(EC2_NODES,),
        platforms=("parallelcluster",),
        why="the cluster's head and login nodes, by the tags ParallelCluster gives them",
        condition=_starts(
            {
                "StringEquals": {
                    f"ssm:resourceTag/{PARALLELCLUSTER_NAME_TAG}": "CLUSTER",
                    f"ssm:resourceTag/{PARALLELCLUSTER_NODE_TYPE_TAG}": [
                        PARALLELCLUSTER_HEAD_NODE,
                        PARALLELCLUSTER_LOGIN_NODE,
                    ],
                }
            }
        ),
    ),
    Grant(
        sid="SessionsOnHyperPodNodes",
        calls={"ssm:StartSession": (CLI,)},
        resources=("arn:aws:sagemaker:REGION:ACCOUNT:cluster/HYPERPOD_CLUSTER_ID",),
        platforms=("hyperpod-slurm",),
        why="HyperPod's nodes are session targets named by their cluster's ARN",
        condition=_starts(),
    ),
    Grant(
        sid="SessionsOnEksSystemNodes",
        calls={"ssm:StartSession": (CLI,)},
        resources=(EC2_NODES,),
        platforms=("kubernetes",),
        why="a private API endpoint is reached through a node of the cluster's system node group, by kiln's tags",
        condition=_starts(
            {
                "StringEquals": {
                    f"ssm:resourceTag/{TAG_EKS_CLUSTER}": "CLUSTER",
                    f"ssm:resourceTag/{TAG_NODE_GROUP}": EKS_SYSTEM_NODE_GROUP,
                }
            }
        ),
    ),
    Grant(
        sid="ShellDocument",
        calls={"ssm:StartSession": (CLI,)},
        resources=(_document(DEFAULT_SHELL_DOCUMENT),),
        platforms=SHELL_PLATFORMS,
        why="the shell, with the account's default session document (a cluster without session_logs)",
        condition=_starts(),
        session_logs=False,
    ),
    Grant(
        sid="LoggedShellDocument",
        calls={"ssm:StartSession": (CLI,)},
        resources=(_document(session_document("CLUSTER")),),
        platforms=SHELL_PLATFORMS,
        why="the shell, with the cluster's own session document, which logs it (spec session_logs); never the "
        "account's default, which would open an unlogged shell",
        condition=_starts(),
        session_logs=True,
    ),
    Grant(
        sid="SessionKey",
        calls=dict.fromkeys(_SESSION_LOGGING["user_actions"]["session_encryption"], (PLUGIN,)),
        resources=("SESSION_KEY_ARN",),
        platforms=SHELL_PLATFORMS,
        why="the plugin makes each logged shell's data key with the cluster's session key (the document's kmsKeyId)",
        session_logs=True,
    ),
    Grant(
        sid="CodeServerDocument",
        calls={"ssm:StartSession": (CLI,)},
        resources=(_document(LOCAL_PORT_FORWARD_DOCUMENT),),
        platforms=SHELL_PLATFORMS,
        why="the forward to code-server's port",
        condition=_starts(),
    ),
    Grant(
        sid="EksEndpointDocument",
        calls={"ssm:StartSession": (CLI,)},
        resources=(_document(PORT_FORWARD_DOCUMENT),),
        platforms=("kubernetes",),
        why="the forward to a private API endpoint",
        condition=_starts(),
    ),
    Grant(
        sid="SessionDataChannel",
        calls={"ssmmessages:OpenDataChannel": (PLUGIN,)},
        resources=("*",),
        platforms=PLATFORMS,
        why="the plugin opens the session's data channel (no resource type exists for it)",
    ),
    Grant(
        sid="OwnSessionsOnly",
        calls={"ssm:ResumeSession": (PLUGIN,), "ssm:TerminateSession": (KILN, PLUGIN)},
        resources=("*",),
        platforms=PLATFORMS,
        why="resume a dropped session and end it: only sessions this identity started, by the tag AWS puts on each",
        condition={"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": "${aws:userid}"}},
    ),
)


def grants(platform: Platform | None = None, *, session_logs: bool | None = None) -> tuple[Grant, ...]:
    """Return the grants PLATFORM needs (all of them when None), for a cluster with or without spec session_logs
    (both when None)."""
    return tuple(
        grant
        for grant in GRANTS
        if (platform is None or platform in grant.platforms)
        and (session_logs is None or grant.session_logs in (None, session_logs))
    )


def policy(platform: Platform | None = None, *, session_logs: bool | None = None) -> dict[str, Any]:
    """Return the policy document for PLATFORM (every platform's statements when None), with or without spec
    session_logs (both when None)."""
    statements = [grant.statement() for grant in grants(platform, session_logs=session_logs)]
    return {"Version": "2012-10-17", "Statement": statements}


def policy_text(platform: Platform | None = None, *, session_logs: bool | None = None) -> str:
    """Return the policy as the README shows it: JSON, two spaces of indent."""
    return json.dumps(policy(platform, session_logs=session_logs), indent=2) + "\n"


def session_documents(platform: Platform, *, session_logs: bool = False) -> set[str]:
    """Return the session documents PLATFORM's grants name, with or without spec session_logs."""
    return {
        resource.rsplit("/", 1)[1]
        for grant in grants(platform, session_logs=session_logs)
        for resource in grant.resources
        if ":document/" in resource
    }


def calls(platform: Platform, caller: Caller, *, session_logs: bool = False) -> set[str]:
    """Return the actions CALLER makes on PLATFORM, with or without spec session_logs, as the grants record them."""
    chosen = grants(platform, session_logs=session_logs)
    return {action for grant in chosen for action, who in grant.calls.items() if caller in who}
