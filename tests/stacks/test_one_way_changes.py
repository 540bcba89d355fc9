"""Properties CloudFormation updates in place that the service changes one way only (platforms.json,
cloudformation.one_way_properties): FSx for Lustre's storage capacity grows and never shrinks; EKS's Kubernetes
version moves up one minor version at a time; PCS's Slurm version moves only to a newer one its current version is
compatible with; a Grafana workspace's version moves up only. A change the other way fails the update and rolls the
deploy back, so the deploy plan (what `kiln diff` prints) refuses it in one line. Template fragments, one rule each;
tests/stacks/test_one_way_versions.py synthesizes the examples that set them."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.catalog.platforms import SOURCE, pcs_slurm_versions, service_fact, version_key
from kiln.changes import one_way_changes, one_way_rules, plan

FSX = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html"
EKS = "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html"
PCS = "https://docs.aws.amazon.com/pcs/latest/userguide/working-with_clusters_version_update.html"
GRAFANA = "https://docs.aws.amazon.com/grafana/latest/userguide/AMG-workspace-version-update.html"
EKS_WHY = "EKS moves a cluster's Kubernetes version up one minor version at a time and never back"
PCS_WHY = "PCS moves a cluster's Slurm version only to a newer one its current version is compatible with"
ROLLS_BACK = "so the update fails and rolls the deploy back"


def _stack(capacity: Any, deployment: str = "PERSISTENT_2") -> dict[str, Any]:
    lustre = {"DeploymentType": deployment, "PerUnitStorageThroughput": 250}
    properties = {"FileSystemType": "LUSTRE", "StorageCapacity": capacity, "SubnetIds": ["subnet-1"]}
    return {
        "Resources": {
            "Lustre": {"Type": "AWS::FSx::FileSystem", "Properties": {**properties, "LustreConfiguration": lustre}}
        }
    }


def _eks(version: Any) -> dict[str, Any]:
    properties = {"Name": "c", "RoleArn": "arn:aws:iam::111122223333:role/r", "Version": version}
    return {"Resources": {"Eks": {"Type": "AWS::EKS::Cluster", "Properties": properties}}}


def _pcs(version: Any) -> dict[str, Any]:
    properties = {"Size": "SMALL", "Scheduler": {"Type": "SLURM", "Version": version}}
    return {"Resources": {"Pcs": {"Type": "AWS::PCS::Cluster", "Properties": properties}}}


def _grafana(version: Any) -> dict[str, Any]:
    properties = {"AccountAccessType": "CURRENT_ACCOUNT", "GrafanaVersion": version}
    return {"Resources": {"Grafana": {"Type": "AWS::Grafana::Workspace", "Properties": properties}}}


def test_a_smaller_file_system_is_refused_in_one_line_with_fsxs_page() -> None:
    result = plan({"t-storage": _stack(4800)}, {"t-storage": _stack(2400)})
    assert result.refused
    assert result.findings() == [
        "t-storage Lustre (AWS::FSx::FileSystem) StorageCapacity 4800 -> 2400: FSx for Lustre only increases a file "
        f"system's storage capacity, never decreases it ({FSX}), {ROLLS_BACK}; keep 4800 or more"
    ]


def test_a_larger_or_equal_file_system_is_an_update() -> None:
    for after in (4800, 7200, "7200"):
        result = plan({"t-storage": _stack(4800)}, {"t-storage": _stack(after)})
        assert not result.refused and result.one_way == ()
        assert result.actions["t-storage"]["Lustre"] in ("update", "same")


def test_a_replaced_file_system_starts_anew_at_any_size() -> None:
    # A new deployment type replaces the file system (a stateful line of its own), so its capacity is a new one's.
    before, after = _stack(4800), _stack(2400, deployment="SCRATCH_2")
    result = plan({"t-storage": before}, {"t-storage": after})
    assert result.actions["t-storage"]["Lustre"] == "replace"
    assert result.one_way == ()


def test_a_value_only_known_at_deploy_is_not_judged() -> None:
    parameter = {"Ref": "Capacity"}
    updated = {"Lustre": "update"}
    assert one_way_changes(_stack(4800)["Resources"], _stack(parameter)["Resources"], updated) == []
    assert one_way_changes(_stack(parameter)["Resources"], _stack(2400)["Resources"], updated) == []
    # Text holding a number is a number, as CloudFormation reads it.
    [change] = one_way_changes(_stack("4800")["Resources"], _stack(2400)["Resources"], updated, stack="s")
    assert (change.before, change.after, change.path) == ("4800", 2400, "/properties/StorageCapacity")
    # A version is text: a parameter or a number (which lost its trailing zero) is not judged.
    updated = {"Eks": "update"}
    assert one_way_changes(_eks("1.36")["Resources"], _eks({"Ref": "Version"})["Resources"], updated) == []
    assert one_way_changes(_eks(1.30)["Resources"], _eks("1.28")["Resources"], updated) == []


def test_an_older_kubernetes_version_is_refused_with_eks_page() -> None:
    result = plan({"t-compute": _eks("1.36")}, {"t-compute": _eks("1.34")})
    assert result.refused
    assert result.findings() == [
        f"t-compute Eks (AWS::EKS::Cluster) Version 1.36 -> 1.34: {EKS_WHY} ({EKS}), {ROLLS_BACK}; keep 1.36 or a "
        "newer version"
    ]


def test_a_kubernetes_version_two_minors_up_is_refused_and_one_is_an_update() -> None:
    result = plan({"t-compute": _eks("1.34")}, {"t-compute": _eks("1.36")})
    assert [o.line() for o in result.one_way] == [
        f"t-compute Eks (AWS::EKS::Cluster) Version 1.34 -> 1.36: {EKS_WHY} ({EKS}), {ROLLS_BACK}; deploy 1.35 "
        "first, then 1.36"
    ]
    for before, after in (("1.34", "1.35"), ("1.35", "1.36"), ("1.9", "1.10")):
        result = plan({"t-compute": _eks(before)}, {"t-compute": _eks(after)})
        assert result.actions["t-compute"]["Eks"] == "update" and result.one_way == (), (before, after)


def test_an_older_slurm_version_is_refused_with_pcs_page() -> None:
    result = plan({"t-compute": _pcs("25.11")}, {"t-compute": _pcs("25.05")})
    assert result.refused
    assert result.findings() == [
        f"t-compute Pcs (AWS::PCS::Cluster) Scheduler/Version 25.11 -> 25.05: {PCS_WHY} ({PCS}), {ROLLS_BACK}; keep "
        "25.11 or a newer version"
    ]


def test_a_slurm_version_outside_pcss_compatibility_table_is_refused() -> None:
    # PCS's table: 23.11 moves to 24.05, 24.11 or 25.05, never straight to 25.11 (a cluster made before kiln's list).
    result = plan({"t-compute": _pcs("23.11")}, {"t-compute": _pcs("25.11")})
    [line] = result.findings()
    assert line.endswith("; from 23.11 it moves only to 24.05 or 24.11 or 25.05: deploy one of those first")
    # Every newer version kiln offers is a move PCS's table allows from each older one kiln offers.
    offered = sorted(pcs_slurm_versions(), key=version_key)
    for i, before in enumerate(offered):
        for after in offered[i + 1 :]:
            assert plan({"t": _pcs(before)}, {"t": _pcs(after)}).one_way == (), (before, after)


def test_an_older_grafana_version_is_refused() -> None:
    result = plan({"t-compute": _grafana("10.4")}, {"t-compute": _grafana("9.4")})
    [change] = result.one_way
    assert (change.path, change.before, change.after, change.source) == (
        "/properties/GrafanaVersion",
        "10.4",
        "9.4",
        GRAFANA,
    )
    assert plan({"t-compute": _grafana("9.4")}, {"t-compute": _grafana("10.4")}).one_way == ()


@pytest.mark.parametrize("template", [_eks, _pcs, _grafana])
def test_the_same_version_is_no_change(template) -> None:
    version = {"_eks": "1.36", "_pcs": "25.11", "_grafana": "10.4"}[template.__name__]
    assert plan({"t": template(version)}, {"t": template(version)}).one_way == ()


def test_the_rules_come_from_the_data_each_with_its_services_page() -> None:
    fact = service_fact("cloudformation", "one_way_properties")
    assert SOURCE.fullmatch(fact.source)
    rules = {(rule.type, rule.property): rule for rule in one_way_rules()}
    assert set(rules) == {
        ("AWS::FSx::FileSystem", "StorageCapacity"),
        ("AWS::EKS::Cluster", "Version"),
        ("AWS::PCS::Cluster", "Scheduler/Version"),
        ("AWS::Grafana::Workspace", "GrafanaVersion"),
    }
    assert [rules[key].source for key in sorted(rules)] == [EKS, FSX, GRAFANA, PCS]
    for rule in rules.values():
        assert rule.why and SOURCE.fullmatch(rule.source), rule
        # A table names versions PCS runs: every version it names is a key or a target of the page's table.
        for old, new in rule.targets.items():
            assert all(version_key(v) > version_key(old) for v in new), (old, new)
    # kiln's Slurm versions each have their row of PCS's table (a version without one would be judged "newer" only).
    assert set(pcs_slurm_versions()) <= set(rules[("AWS::PCS::Cluster", "Scheduler/Version")].targets)
