"""Which changes roll EKS nodes, as `kiln diff` says them (issue 46, item 4): a change of `launcher.env` or of the
bootstrap steps gives the accelerated group's launch template a new version, and EKS replaces every node of the
group. The roll deploys (the training pods' disruption budget holds it at a busy node), so the line is one to read:
`kiln diff` exits 0. A changed min_count sets the group's size at once, past the budgets: a finding (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.changes import Plan
from kiln.cli.main import main
from tests.support.day_two import deploy_plan, example
from tests.support.specs import changed

pytestmark = pytest.mark.slow  # the EKS example synthesized before and after each change

STACK = "llm-eks-compute"


def _roll_lines(result: Plan) -> list[str]:
    return [line for line in result.notes() if "rolls" in line]


def test_a_changed_launcher_env_rolls_the_gpu_group_within_its_budget() -> None:
    before = example("p5-eks")
    after = changed(before, launcher__env={"NCCL_DEBUG": "INFO"})
    result = deploy_plan(before, after)
    # Nothing refused, nothing stateful: the deploy goes through.
    assert not result.refused and result.findings() == [], result.findings()
    [roll] = result.rolls
    assert (roll.stack, roll.group, roll.max_nodes) == (STACK, "p5", 4)
    assert roll.because == ("a new launch template version",)
    [line] = _roll_lines(result)
    assert line.startswith(f"{STACK} {roll.logical_id}: rolls up to 4 nodes of group p5 (")
    assert "training pods wait for their disruption budget" in line
    assert "after 15 minutes EKS fails the update" in line


def test_a_changed_bootstrap_step_rolls_the_group_too() -> None:
    before = example("p5-eks")
    # A step of the examples' own (beside examples/workshop-g6-pcs.yaml), on the compute nodes at every boot.
    step = {"name": "shared_dir", "path": "workshop/shared-dir.sh", "phase": "configure", "roles": ["compute"]}
    after = changed(before, bootstrap__steps=[step])
    result = deploy_plan(before, after)
    assert [r.group for r in result.rolls] == ["p5"]
    assert not result.refused


def test_an_unchanged_spec_rolls_nothing() -> None:
    before = example("p5-eks")
    result = deploy_plan(before, changed(before, tags={"team": "ml"}))
    assert result.rolls == () and result.notes() == []


def test_a_changed_min_count_resizes_the_group_past_the_budgets() -> None:
    before = example("p5-eks")
    after = changed(before, compute__groups=[{**before["compute"]["groups"][0], "min_count": 1}])
    result = deploy_plan(before, after)
    [resize] = result.resizes
    assert (resize.group, resize.before, resize.after) == ("p5", 0, 1)
    [line] = [line for line in result.findings() if "sets group p5's size to 1 node (was 0 in the template)" in line]
    assert "without their disruption budgets" in line and "terminating those nodes" in line
    assert not result.refused


def test_kiln_diff_prints_the_roll_and_exits_0(tmp_path: Path, capsys) -> None:
    before = example("p5-eks")
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    # The examples' relative paths stay below examples/.
    old.write_text(yaml.safe_dump(before))
    new.write_text(yaml.safe_dump(changed(before, launcher__env={"NCCL_DEBUG": "INFO"})))
    code = main(["diff", "--spec", str(new), "--before", str(old)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "rolls up to 4 nodes of group p5" in out
    assert out.strip().splitlines()[-1].endswith("1 node group roll (above)")


def test_a_renamed_group_ends_the_old_groups_jobs_in_one_line() -> None:
    before = example("p5-eks")
    after = changed(before, compute__groups=[{**before["compute"]["groups"][0], "name": "h100"}])
    result = deploy_plan(before, after)
    [gone] = result.deleted_groups
    assert (gone.group, gone.because) == ("p5", ())
    [line] = [line for line in result.findings() if "group p5 is removed" in line]
    assert "draining each node for at most 5 minutes" in line and "whatever its pods' disruption budgets" in line
    assert not result.refused


def test_a_group_replaced_for_its_capacity_type_ends_its_jobs_too() -> None:
    before = example("p5-eks")
    after = changed(before, compute__groups=[{**before["compute"]["groups"][0], "capacity": {"type": "spot"}}])
    result = deploy_plan(before, after)
    [gone] = result.deleted_groups
    assert gone.group == "p5" and "CapacityType" in gone.because
    assert any("group p5 is replaced (" in line for line in result.findings())
    # A replaced group is no roll of the old one.
    assert result.rolls == ()
