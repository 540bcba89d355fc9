"""spec -> constructs for the resilience section on HyperPod (either orchestrator) and EKS: node recovery, deep health
checks, node repair and the node monitoring agent follow the spec (built, not synthesized; the construct tests read
the templates)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from kiln.catalog.platforms import service_fact
from kiln.constructs.children import l1_of
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.paths import ROOT

# Every spec here turns off what the defaults switch on.
OFF = {"node_recovery": "none"}


def _built(example: str, **resilience: Any):
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data["resilience"] = resilience
    return build_cluster(new_app(), parse_spec(data), nag=False).compute.backend


def _repair(construct) -> dict[str, bool]:
    """Return whether EKS repairs each managed node group of the EKS cluster CONSTRUCT, by group."""
    groups = dict(construct.node_groups)
    if construct.system_node_group is not None:
        groups["system"] = construct.system_node_group
    return {
        name: Stack.of(construct).resolve(l1_of(group, eks.CfnNodegroup).node_repair_config)["enabled"]
        for name, group in groups.items()
    }


@pytest.mark.parametrize("example", ["p5-hyperpod-slurm.yaml", "p5-hyperpod-eks.yaml"])
def test_hyperpod_leaves_faulty_nodes_and_skips_deep_checks_when_told(example: str) -> None:
    build = _built(example, **OFF, deep_health_checks=False)
    cluster = build.construct.cluster
    st = Stack.of(cluster)
    assert st.resolve(cluster.node_recovery) == "None"
    groups = st.resolve(cluster.instance_groups)
    assert groups and all("onStartDeepHealthChecks" not in group for group in groups)
    if build.eks is not None:
        # HyperPod's EKS cluster: its system group is not repaired either; the node monitoring agent stays.
        assert _repair(build.eks) == {"system": False}
        assert build.eks.node_monitoring_agent is not None


def test_eks_without_node_recovery_or_health_checks_repairs_nothing_and_runs_no_agent() -> None:
    build = _built("p5-eks.yaml", **OFF, health_checks=False)
    repair = _repair(build.construct)
    assert len(repair) >= 2 and set(repair.values()) == {False}
    assert build.construct.node_monitoring_agent is None


def test_eks_by_default_repairs_every_group_and_runs_the_agent() -> None:
    build = _built("p5-eks.yaml")
    repair = _repair(build.construct)
    assert len(repair) >= 2 and set(repair.values()) == {True}
    assert build.construct.node_monitoring_agent is not None


def test_the_examples_templates_carry_the_default_resilience(example_assemblies) -> None:
    """The shipped EKS and HyperPod-with-EKS examples, synthesized through app.py: every managed node group repaired,
    EKS's node monitoring agent installed, HyperPod's NodeRecovery and its GPU group's deep health checks."""
    agent = service_fact("eks", "node_monitoring_agent").value["addon"]
    for stem, cluster in (("p5-eks", "llm-eks"), ("p5-hyperpod-eks", "llm-hp-eks")):
        resources = example_assemblies[stem].templates()[f"{cluster}-compute"]["Resources"].values()
        groups = [r["Properties"] for r in resources if r["Type"] == "AWS::EKS::Nodegroup"]
        assert groups and all(g["NodeRepairConfig"] == {"Enabled": True} for g in groups)
        assert [r["Properties"]["AddonName"] for r in resources if r["Type"] == "AWS::EKS::Addon"].count(agent) == 1
    resources = example_assemblies["p5-hyperpod-eks"].templates()["llm-hp-eks-compute"]["Resources"].values()
    [hyperpod] = [r["Properties"] for r in resources if r["Type"] == "AWS::SageMaker::Cluster"]
    assert hyperpod["NodeRecovery"] == "Automatic"
    checks = {g["InstanceGroupName"]: g.get("OnStartDeepHealthChecks") for g in hyperpod["InstanceGroups"]}
    # Its one group is of p5s: accelerated.
    assert checks and all(value == service_fact("hyperpod", "deep_health_checks").value for value in checks.values())
