"""Placement groups live where they are used (issue 46, item 3): in the compute stack, beside the launch templates that
name them. Renaming or removing a group, switching an EFA group to reserved capacity, or between EFA and non-EFA types
is then a change within one stack, which deploys: before, the network stack made them and compute imported each name,
so the network stack's update dropped an export in use and CloudFormation refused it.

The one-off upgrade of a cluster deployed with the old layout: `kiln diff` says to deploy the compute stack first
(`cdk deploy <name>-compute --exclusively`), which drops the import, then the rest."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from kiln.catalog import instance_type
from kiln.changes import EXPORT_RULE, exports, imports, plan, references
from tests.support.day_two import deploy_plan, example, templates
from tests.support.specs import changed

# The slow tier (`make test-slow`; .ci/run runs both): twelve syntheses, about 30 s on 2 cores.
pytestmark = pytest.mark.slow

PLACEMENT = "AWS::EC2::PlacementGroup"
NODE_GROUPS = {"pcs": "AWS::PCS::ComputeNodeGroup", "eks": "AWS::EKS::Nodegroup"}
BLOCK = {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}
RESERVATION = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
# A GPU type without EFA (the catalog's efa_supported), for the examples' p5.48xlarge with it.
WITHOUT_EFA = "g6.xlarge"


def _two_groups(stem: str) -> dict[str, Any]:
    """Return examples/STEM.yaml with two on-demand EFA groups (p5), each with its placement group."""
    spec = example(stem)
    first = {**spec["compute"]["groups"][0], "capacity": {"type": "on-demand"}, "min_count": 0}
    return changed(spec, compute__groups=[first, {**first, "name": "spare"}])


def _changes(stem: str) -> dict[str, dict[str, Any]]:
    """Return the group changes of issue 46, item 3, over _two_groups(STEM)."""
    before = _two_groups(stem)
    first, second = before["compute"]["groups"]
    return {
        "rename": changed(before, compute__groups=[{**first, "name": "renamed"}, second]),
        "remove": changed(before, compute__groups=[first]),
        "capacity-block": changed(before, compute__groups=[{**first, "capacity": BLOCK}, second]),
        "reservation": changed(before, compute__groups=[{**first, "capacity": RESERVATION}, second]),
        "no-efa": changed(before, compute__groups=[{**first, "instance_type": WITHOUT_EFA}, second]),
    }


def test_the_changed_type_has_no_efa() -> None:
    assert instance_type("p5.48xlarge").efa_supported and not instance_type(WITHOUT_EFA).efa_supported


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template.get("Resources", {}).items() if r["Type"] == resource_type}


def _stacks(data: dict[str, Any]) -> tuple[str, str]:
    return f"{data['name']}-network", f"{data['name']}-compute"


@pytest.mark.parametrize("stem", ["p5-pcs", "p5-eks"])
@pytest.mark.parametrize("change", ["rename", "remove", "capacity-block", "reservation", "no-efa"])
def test_a_group_change_deploys_within_the_compute_stack(stem: str, change: str) -> None:
    before, after = _two_groups(stem), _changes(stem)[change]
    result = deploy_plan(before, after)
    # Nothing refused; the only lines say which node group goes with its jobs (kiln.changes.rolls).
    assert not result.refused
    assert result.findings() == [g.line() for g in result.deleted_groups]
    network, compute = _stacks(before)
    ended = {g.logical_id for g in result.deleted_groups}
    # A renamed or removed group, and one replaced: EKS cannot change a capacity type, PCS an instance type.
    kind = "pcs" if "pcs" in stem else "eks"
    replaced = {"pcs": "no-efa", "eks": "capacity-block"}[kind]
    assert len(ended) == (1 if change in ("rename", "remove", replaced) else 0)
    assert ended <= set(_of_type(templates(before)[compute], NODE_GROUPS[kind]))
    # The network stack keeps what it had; the compute stack drops the group's placement group.
    assert set(result.actions[network].values()) == {"same"}
    old = _of_type(templates(before)[compute], PLACEMENT)
    new = _of_type(templates(after)[compute], PLACEMENT)
    (dropped,) = set(old) - set(new)
    assert result.actions[compute][dropped] == "delete"
    # A renamed group gets a placement group of its own (EC2 generates its name: no name is taken twice).
    assert [result.actions[compute][lid] for lid in set(new) - set(old)] == (["create"] if change == "rename" else [])
    node_groups = _of_type(templates(before)[compute], NODE_GROUPS[kind])
    # The node group that named the dropped placement group in DependsOn: CloudFormation deletes the group last.
    # Renamed or removed, it goes (the renamed one comes new); EKS cannot change a capacity type, PCS an instance type
    # (the node group's name holds it), so those replace it; the other cases update it in place.
    (user,) = [lid for lid, r in node_groups.items() if dropped in r.get("DependsOn", ())]
    expected = "delete" if change in ("rename", "remove") else "replace" if change == replaced else "update"
    assert result.actions[compute][user] == expected


@pytest.mark.parametrize("stem", ["p5-pcs", "p5-eks"])
def test_a_group_moved_to_an_efa_type_gets_its_placement_group(stem: str) -> None:
    before, after = _changes(stem)["no-efa"], _two_groups(stem)
    result = deploy_plan(before, after)
    # Nothing refused; PCS replaces the node group whose name holds the instance type, and says so.
    assert not result.refused
    assert result.findings() == [g.line() for g in result.deleted_groups]
    assert len(result.deleted_groups) == (1 if stem == "p5-pcs" else 0)
    network, compute = _stacks(before)
    assert set(result.actions[network].values()) == {"same"}
    old, new = _of_type(templates(before)[compute], PLACEMENT), _of_type(templates(after)[compute], PLACEMENT)
    (added,) = set(new) - set(old)
    assert result.actions[compute][added] == "create"


@pytest.mark.parametrize("stem", ["p5-pcs", "p5-eks"])
def test_each_node_group_names_its_placement_group_and_nothing_is_imported(stem: str) -> None:
    before = _two_groups(stem)
    network, compute = _stacks(before)
    produced = templates(before)
    assert _of_type(produced[network], PLACEMENT) == {}
    assert not [name for name in exports(produced[network]) if "Placement" in name]
    placements = _of_type(produced[compute], PLACEMENT)
    assert len(placements) == 2
    assert all(r["Properties"]["Strategy"] == "cluster" for r in placements.values())
    kind = "pcs" if "pcs" in stem else "eks"
    launch_templates = _of_type(produced[compute], "AWS::EC2::LaunchTemplate")
    for lid, node_group in _of_type(produced[compute], NODE_GROUPS[kind]).items():
        if "System" in lid or "Login" in lid:
            continue
        (placement,) = set(node_group.get("DependsOn", ())) & set(placements)
        # Its launch template names the same group, from this stack.
        (template,) = references(node_group["Properties"]) & set(launch_templates)
        data = launch_templates[template]["Properties"]["LaunchTemplateData"]
        assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [placement, "GroupName"]}}
    assert not [name for name in imports(produced[compute]["Resources"]) if "Placement" in name]


def _old_layout(produced: dict[str, dict[str, Any]], network: str, compute: str) -> dict[str, dict[str, Any]]:
    """Return PRODUCED as kiln laid it out before: each placement group in the network stack, its name exported
    there and imported by the compute stack (Fn::ImportValue where compute reads Fn::GetAtt GroupName)."""
    old = copy.deepcopy(produced)
    moved = _of_type(old[compute], PLACEMENT)
    names = {}
    for lid, resource in moved.items():
        del old[compute]["Resources"][lid]
        old[network]["Resources"][lid] = resource
        key = f"ExportsOutputFnGetAtt{lid}GroupName"
        names[lid] = f"{network}:{key}"
        output = {"Value": {"Fn::GetAtt": [lid, "GroupName"]}, "Export": {"Name": names[lid]}}
        old[network].setdefault("Outputs", {})[key] = output

    def imported(value: Any) -> Any:
        if isinstance(value, dict):
            target = value.get("Fn::GetAtt")
            if len(value) == 1 and isinstance(target, list) and target[0] in moved:
                return {"Fn::ImportValue": names[target[0]]}
            return {k: imported(v) for k, v in value.items()}
        if isinstance(value, list):
            return [imported(v) for v in value]
        return value

    for resource in old[compute]["Resources"].values():
        resource["Properties"] = imported(resource.get("Properties", {}))
        depends = [d for d in resource.get("DependsOn", ()) if d not in moved]
        if "DependsOn" in resource:
            resource["DependsOn"] = depends
    return old


@pytest.mark.parametrize("stem", ["p5-pcs", "p5-eks"])
def test_the_upgrade_from_placement_groups_in_the_network_stack_deploys_compute_first(stem: str) -> None:
    data = _two_groups(stem)
    network, compute = _stacks(data)
    new = templates(data)
    old = _old_layout(new, network, compute)
    # Deployed in the usual order (network first), the network stack drops exports compute still imports.
    upgrade = plan(old, new)
    assert upgrade.refused and len(upgrade.blocked) == 2
    for line in upgrade.findings():
        assert line.startswith(f"{network} export {network}:ExportsOutputFnGetAttPlacement"), line
        assert line.endswith(
            f"would be removed while {compute} imports it: {EXPORT_RULE}, and rolls the deploy back when {network} "
            f"deploys first; deploy {compute} first, whose new template no longer imports it: "
            f"`npx cdk deploy {compute} --exclusively` removes the import, then deploy the rest"
        ), line
    # The order the line gives deploys: compute alone (its new placement groups, no import), then the rest.
    compute_first = {**old, compute: new[compute]}
    alone = plan(old, compute_first)
    assert not alone.refused and alone.findings() == []
    rest = plan(compute_first, new)
    assert not rest.refused and rest.findings() == []
    assert {a for lid, a in rest.actions[network].items() if lid in _of_type(old[network], PLACEMENT)} == {"delete"}


def test_kiln_diff_gives_the_upgrade_order(tmp_path, capsys) -> None:
    from kiln.cli.main import main

    data = _two_groups("p5-pcs")
    network, compute = _stacks(data)
    saved = tmp_path / "deployed"
    saved.mkdir()
    for name, template in _old_layout(templates(data), network, compute).items():
        (saved / f"{name}.template.json").write_text(json.dumps(template))
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data))
    code = main(["diff", "--spec", str(spec), "--stack-templates", str(saved)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    refused = [line for line in out if line.startswith(f"{network} export ")]
    assert len(refused) == 2, out
    assert all(f"`npx cdk deploy {compute} --exclusively` removes the import" in line for line in refused), refused


def _producer(*, export: bool = True) -> dict[str, Any]:
    group = {"Type": "AWS::EC2::PlacementGroup", "Properties": {"Strategy": "cluster"}}
    outputs = {"Pg": {"Value": {"Fn::GetAtt": ["Pg", "GroupName"]}, "Export": {"Name": "net:Pg"}}}
    return {"Resources": {"Pg": group}, **({"Outputs": outputs} if export else {})}


def _consumer(group_name: Any) -> dict[str, Any]:
    data = {"Placement": {"GroupName": group_name}}
    template = {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": data}}
    return {"Resources": {"Lt": template}}


def test_deploying_the_importer_first_is_said_only_where_it_works() -> None:
    before = {"net": _producer(), "app": _consumer({"Fn::ImportValue": "net:Pg"})}
    # The importer's new template makes its own group: deploying it first drops the import.
    own = {"Resources": {**_consumer({"Ref": "Own"})["Resources"], "Own": _producer()["Resources"]["Pg"]}}
    (first,) = plan(before, {"net": _producer(export=False), "app": own}).blocked
    assert first.importers_first and "`npx cdk deploy app --exclusively` removes the import" in first.line()
    # It still imports it: only destroying the importer frees the export.
    (still,) = plan(before, {"net": _producer(export=False), "app": before["app"]}).blocked
    assert not still.importers_first and "`npx cdk destroy app` removes the import" in still.line()
    # It imports an export the deployed stacks do not have yet: deployed first, it would fail on that import.
    other = _consumer({"Fn::ImportValue": "net:Other"})
    (missing,) = plan(before, {"net": _producer(export=False), "app": other}).blocked
    assert not missing.importers_first and "npx cdk destroy app" in missing.line()
