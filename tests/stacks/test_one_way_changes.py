"""Properties CloudFormation updates in place that the service changes one way only: FSx for Lustre's storage
capacity grows and never shrinks (platforms.json, cloudformation.increase_only_properties). A smaller value fails the
update and rolls the deploy back, so the deploy plan (what `kiln diff` prints) refuses it in one line."""

from __future__ import annotations

from typing import Any

from kiln.catalog.platforms import service_fact
from kiln.changes import increase_only, one_way_changes, plan

SOURCE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html"


def _stack(capacity: Any, deployment: str = "PERSISTENT_2") -> dict[str, Any]:
    lustre = {"DeploymentType": deployment, "PerUnitStorageThroughput": 250}
    properties = {"FileSystemType": "LUSTRE", "StorageCapacity": capacity, "SubnetIds": ["subnet-1"]}
    return {
        "Resources": {
            "Lustre": {"Type": "AWS::FSx::FileSystem", "Properties": {**properties, "LustreConfiguration": lustre}}
        }
    }


def test_a_smaller_file_system_is_refused_in_one_line_with_fsxs_page() -> None:
    result = plan({"t-storage": _stack(4800)}, {"t-storage": _stack(2400)})
    assert result.refused
    assert result.findings() == [
        "t-storage Lustre (AWS::FSx::FileSystem) StorageCapacity 4800 -> 2400: FSx for Lustre only increases a file "
        f"system's storage capacity, never decreases it ({SOURCE}), so the update fails and rolls the deploy back; "
        "keep 4800 or more"
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


def test_the_rule_comes_from_the_data_with_its_source() -> None:
    fact = service_fact("cloudformation", "increase_only_properties")
    assert fact.source == SOURCE
    assert increase_only() == {
        "AWS::FSx::FileSystem": {
            "/properties/StorageCapacity": (
                "FSx for Lustre only increases a file system's storage capacity, never decreases it"
            )
        }
    }
