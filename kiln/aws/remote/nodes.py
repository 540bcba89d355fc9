"""Where a command runs (a Target): a running node of the cluster found by its tags, or this machine for Kubernetes;
and the shell preamble every command runs in on a node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kiln.aws.errors import aws_call
from kiln.aws.remote.cluster import ClusterHandle, NotRunning, RemoteError, Unreachable
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP, HYPERPOD_CONTROLLER_GROUP, PARALLELCLUSTER, PCS
from kiln.contracts.tags import TAG_EKS_CLUSTER, TAG_NODE_GROUP

if TYPE_CHECKING:
    from kiln.aws.session import Ec2Filter, Session

PCS_NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"
# ParallelCluster tags every instance it launches with its cluster's name and the node's type: HeadNode, Compute, and
# LoginNode for a login pool's instances (which also carry parallelcluster:login-nodes-pool-name). AWS ParallelCluster's
# own sources: cli/src/pcluster/constants.py (PCLUSTER_CLUSTER_NAME_TAG, PCLUSTER_NODE_TYPE_TAG,
# PCLUSTER_LOGIN_NODES_POOL_NAME_TAG), cli/src/pcluster/templates/cdk_builder_utils.py (get_default_instance_tags) and
# cli/src/pcluster/templates/login_nodes_stack.py (the pool's launch template tags its instances "LoginNode"), at
# https://github.com/aws/aws-parallelcluster/tree/451cc5320d5d8a9318075990ead7f76f74372f85
PARALLELCLUSTER_NAME_TAG = "parallelcluster:cluster-name"
PARALLELCLUSTER_NODE_TYPE_TAG = "parallelcluster:node-type"
PARALLELCLUSTER_HEAD_NODE = "HeadNode"
PARALLELCLUSTER_LOGIN_NODE = "LoginNode"

# Run on the node before the command: Slurm lives outside the default PATH on every backend
# (/opt/slurm on ParallelCluster and HyperPod, /opt/aws/pcs/scheduler/slurm-VERSION on PCS), and
# install_launcher.sh links kiln-launch into /usr/local/bin. The login shell adds /etc/profile.d (kiln's NCCL env).
NODE_PREAMBLE = """\
export HOME="${HOME:-/root}"
for kiln_bin in /usr/local/bin /opt/slurm/bin /opt/aws/pcs/scheduler/slurm-*/bin; do
  if [ -d "$kiln_bin" ]; then PATH="$PATH:$kiln_bin"; fi
done
export PATH
cd "$HOME" 2>/dev/null || cd /
"""


@dataclass(frozen=True)
class Target:
    """Where run_command runs: an EC2 instance, a HyperPod node's session target, or here with a kubeconfig."""

    kind: Literal["ec2", "hyperpod", "kubernetes"]
    # The instance id, the Session Manager target, or the EKS cluster's name.
    address: str
    region: str
    # What messages call it, e.g. "PCS login node i-0abc".
    label: str


def find_head(session: Session, cluster: ClusterHandle) -> Target:
    """Return where CLUSTER runs commands: its login or head node, or this machine for Kubernetes."""
    if cluster.uses_kubernetes:
        name = cluster.eks_cluster_name
        return Target("kubernetes", name, cluster.region, f"EKS cluster {name}")
    platform = cluster.platform
    if platform is PCS:
        return pcs_login_node(session, cluster)
    if platform is PARALLELCLUSTER:
        return parallelcluster_node(session, cluster)
    return hyperpod_node(session, cluster)


def pcs_login_node(session: Session, cluster: ClusterHandle, *, node: str | None = None) -> Target:
    """Return a running login node of CLUSTER (PCS): NODE if it is one, else the oldest."""
    group = cluster.pcs_login_node_group_id
    if group is None:
        raise RemoteError(
            f"{cluster.environment}: the PCS cluster has no login nodes and `kiln ci run` runs commands on one: "
            "set compute.login_nodes.count to 1 or more in the spec and redeploy with `kiln ci up`"
        )
    instance = _running_instance(
        session,
        cluster.region,
        {PCS_NODE_GROUP_TAG: group},
        missing=f"no running PCS login node in node group {group} yet",
        node=node,
        what=f"PCS login node of node group {group}",
    )
    return Target("ec2", instance, cluster.region, f"PCS login node {instance}")


def parallelcluster_node(
    session: Session, cluster: ClusterHandle, *, node_type: str = PARALLELCLUSTER_HEAD_NODE, node: str | None = None
) -> Target:
    """Return a running node of CLUSTER (ParallelCluster) of NODE_TYPE (HeadNode, LoginNode): NODE if it is one, else
    the oldest."""
    name = cluster.cluster_name
    kind = "head node" if node_type == PARALLELCLUSTER_HEAD_NODE else "login node"
    instance = _running_instance(
        session,
        cluster.region,
        {PARALLELCLUSTER_NAME_TAG: name, PARALLELCLUSTER_NODE_TYPE_TAG: node_type},
        missing=f"no running {kind} of ParallelCluster cluster {name} yet",
        node=node,
        what=f"{kind} of ParallelCluster cluster {name}",
    )
    return Target("ec2", instance, cluster.region, f"ParallelCluster {kind} {instance}")


def hyperpod_node(
    session: Session, cluster: ClusterHandle, *, group: str = HYPERPOD_CONTROLLER_GROUP, node: str | None = None
) -> Target:
    """Return the Session Manager target of a running node of CLUSTER's (HyperPod) instance group GROUP: NODE if it is
    one, else the oldest."""
    arn = cluster.hyperpod_cluster_arn
    sagemaker = session.client("sagemaker", region_name=cluster.region)
    with aws_call("sagemaker:ListClusterNodes", RemoteError):
        pages = sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=arn, InstanceGroupNameContains=group)
        nodes = [n for page in pages for n in page["ClusterNodeSummaries"]]
    running = [
        n
        for n in nodes
        if n.get("InstanceGroupName") == group and n.get("InstanceStatus", {}).get("Status") == "Running"
    ]
    if not running:
        raise Unreachable(f"no running node in HyperPod instance group {group} of {cluster.cluster_name} yet")
    running.sort(key=lambda n: (_launched(n), n["InstanceId"]))
    instance = _chosen([n["InstanceId"] for n in running], node, f"node of HyperPod instance group {group}")
    address = f"sagemaker-cluster:{cluster.hyperpod_cluster_id}_{group}-{instance}"
    return Target("hyperpod", address, cluster.region, f"HyperPod {group} node {instance}")


def system_node(session: Session, region: str, cluster: str) -> str:
    """Return a running node of EKS cluster CLUSTER's system node group: the one its API is forwarded through."""
    return _running_instance(
        session,
        region,
        {TAG_EKS_CLUSTER: cluster, TAG_NODE_GROUP: EKS_SYSTEM_NODE_GROUP},
        missing=f"EKS cluster {cluster} has a private API endpoint and no running system node to reach it through: "
        f"check that its {EKS_SYSTEM_NODE_GROUP!r} node group is ACTIVE and its instances carry the tags "
        f"{TAG_EKS_CLUSTER}={cluster} and {TAG_NODE_GROUP}={EKS_SYSTEM_NODE_GROUP} (an older kiln did not tag them: "
        "redeploy with `kiln ci up`)",
    )


def _running_instance(
    session: Session,
    region: str,
    tags: Mapping[str, str],
    *,
    missing: str,
    node: str | None = None,
    what: str = "node",
) -> str:
    """Return the oldest running instance carrying TAGS, or NODE when it is one of them (NotRunning, naming WHAT, when
    it is not); Unreachable(MISSING) when there is none."""
    ec2 = session.client("ec2", region_name=region)
    filters: list[Ec2Filter] = [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": ["running"]})
    with aws_call("ec2:DescribeInstances", RemoteError):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    if not instances:
        raise Unreachable(missing)
    instances.sort(key=lambda i: (_launched(i), i["InstanceId"]))
    return _chosen([i["InstanceId"] for i in instances], node, what)


def _launched(item: Mapping[str, Any]) -> float:
    """Return when ITEM (an instance or a HyperPod node) launched, as a timestamp; 0 when AWS did not say."""
    launched = item.get("LaunchTime")
    return launched.timestamp() if launched is not None and hasattr(launched, "timestamp") else 0.0


def _chosen(running: list[str], node: str | None, what: str) -> str:
    """Return NODE if it is in RUNNING (oldest first), else the oldest; NotRunning when NODE is not there."""
    if node is None:
        return running[0]
    if node not in running:
        raise NotRunning(node, what, running)
    return node
