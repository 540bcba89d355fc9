"""EksTrainingCluster's resilience: node repair on every managed node group, and EKS's node monitoring agent add-on
whose health conditions it acts on (platforms.json, eks.node_repair and eks.node_monitoring_agent)."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk.assertions import Template

from kiln.catalog.platforms import service_fact
from kiln.constructs import TrainingVpc, TrainingVpcProps
from kiln.constructs.children import l1_of
from kiln.constructs.eks import EksTrainingCluster
from kiln.constructs.eks_props import EksTrainingClusterProps
from tests.support.constructs import logical_id, stack
from tests.support.eks_clusters import _both, _props


def _node_groups(template: Template) -> dict[str, dict]:
    return {key: r["Properties"] for key, r in template.find_resources("AWS::EKS::Nodegroup").items()}


def _agents(template: Template) -> list[dict]:
    addon = service_fact("eks", "node_monitoring_agent").value["addon"]
    return [
        r["Properties"]
        for r in template.find_resources("AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == addon
    ]


def test_every_node_group_is_repaired_system_and_accelerated(eks) -> None:
    training, hyperpod = (_node_groups(template) for template, _ in _both(eks))
    # Three accelerated groups and the system group; HyperPod's orchestrator has the system group only.
    assert len(training) == 4 and len(hyperpod) == 1
    for groups in (training, hyperpod):
        assert {key: props.get("NodeRepairConfig") for key, props in groups.items()} == {
            key: {"Enabled": True} for key in groups
        }
    # EKS's guard rails stay (no thresholds or overrides): repair stops when too many nodes of a group are unhealthy.
    system = _props(eks["template"], eks["cluster"].system_node_group)
    assert system["NodeRepairConfig"] == {"Enabled": True}


def test_the_node_monitoring_agent_runs_as_an_eks_addon_without_an_identity(eks) -> None:
    for template, cluster in _both(eks):
        (agent,) = _agents(template)
        assert agent["ClusterName"] == {"Ref": logical_id(cluster.cluster.node.default_child)}
        # EKS's default version for the cluster's Kubernetes version; no permissions, so no role or Pod Identity;
        # removed from the cluster when the props drop it.
        assert "AddonVersion" not in agent
        assert "ServiceAccountRoleArn" not in agent and "PodIdentityAssociations" not in agent
        assert agent["PreserveOnDelete"] is False


def test_without_them_no_agent_and_no_repair() -> None:
    """A cluster whose props turn both off (built, not synthesized): no add-on, and a system group EKS does not
    repair."""
    st = stack("EksNoRepair")
    net = TrainingVpc(
        st, "Vpc", TrainingVpcProps(availability_zone="us-east-1a", second_availability_zone="us-east-1b")
    )
    base = EksTrainingClusterProps(vpc=net.vpc, node_subnet=net.compute_subnet)
    assert base.node_repair and base.node_monitoring_agent
    props = EksTrainingClusterProps(
        vpc=net.vpc, node_subnet=net.compute_subnet, node_repair=False, node_monitoring_agent=False
    )
    cluster = EksTrainingCluster(st, "Cluster", props)
    assert cluster.node_monitoring_agent is None
    assert cluster.node.try_find_child("NodeMonitoringAgent") is None
    nodegroup = l1_of(cluster.system_node_group, eks_v2.CfnNodegroup)
    assert st.resolve(nodegroup.node_repair_config) == {"enabled": False}
