"""HyperPodCluster's resilience props, under either orchestrator: NodeRecovery and the accelerated groups' deep health
checks follow node_recovery and deep_health_checks (platforms.json, hyperpod.node_recovery and
hyperpod.deep_health_checks)."""

from __future__ import annotations

import pytest
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from kiln.catalog.platforms import service_fact
from kiln.constructs._checks import PropError
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from tests.support.constructs import imported_vpc, plain_bootstrap, stack

EKS_CLUSTER_SECURITY_GROUP = "sg-0123456789abcdef0"


def _cluster(orchestrator: str, **resilience) -> tuple[Stack, HyperPodCluster]:
    """A HyperPod cluster (built, not synthesized) with a GPU group and, under Slurm, a CPU controller."""
    st = stack(f"HyperPod{orchestrator.title()}")
    vpc = imported_vpc(st)
    groups = [HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2)]
    eks_cluster = None
    if orchestrator == "slurm":
        groups.append(HyperPodInstanceGroup(name="controller", instance_type="m5.8xlarge", count=1, role="controller"))
    else:
        eks_cluster = eks.Cluster.from_cluster_attributes(
            st, "Eks", cluster_name="orchestrator", cluster_security_group_id=EKS_CLUSTER_SECURITY_GROUP
        )
    props = HyperPodClusterProps(
        cluster_name=f"hp-{orchestrator}",
        vpc=vpc,
        subnet=vpc.private_subnets[0],
        instance_groups=groups,
        lifecycle=plain_bootstrap(st, "on_create.sh"),
        cluster_env={},
        orchestrator=orchestrator,
        eks_cluster=eks_cluster,
        **resilience,
    )
    return st, HyperPodCluster(st, "Cluster", props)


def _resolved(st: Stack, cluster: HyperPodCluster) -> tuple[str, dict[str, list[str] | None]]:
    groups = {
        g["instanceGroupName"]: g.get("onStartDeepHealthChecks") for g in st.resolve(cluster.cluster.instance_groups)
    }
    return st.resolve(cluster.cluster.node_recovery), groups


@pytest.mark.parametrize("orchestrator", ["slurm", "eks"])
def test_by_default_hyperpod_recovers_nodes_and_checks_accelerated_ones_deeply(orchestrator: str) -> None:
    recovery, groups = _resolved(*_cluster(orchestrator))
    assert recovery == service_fact("hyperpod", "node_recovery").value["automatic"] == "Automatic"
    assert groups["p5"] == service_fact("hyperpod", "deep_health_checks").value
    assert groups.get("controller") is None


@pytest.mark.parametrize("orchestrator", ["slurm", "eks"])
def test_recovery_none_and_no_deep_health_checks(orchestrator: str) -> None:
    recovery, groups = _resolved(*_cluster(orchestrator, node_recovery="none", deep_health_checks=False))
    assert recovery == "None"
    assert all(checks is None for checks in groups.values())


def test_an_unknown_recovery_is_refused_in_one_line() -> None:
    with pytest.raises(PropError, match=r"node_recovery: got 'Automatic'; allowed: automatic, none"):
        _cluster("slurm", node_recovery="Automatic")
