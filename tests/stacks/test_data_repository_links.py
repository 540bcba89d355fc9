"""Links between the file system and S3 (issue 46, item 1): kiln links '/' of every file system it makes to its data
bucket or storage.lustre.data_repository.import_path. A new import path (or a new data bucket) replaces the link,
CloudFormation creates the new link before it deletes the old one, and FSx takes no second link on an overlapping
directory ('/' only as a file system's one link: platforms.json, fsx_lustre.data_repository_links), so the deploy
would roll back. `kiln diff` refuses it in one line with the steps that work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.catalog.platforms import service_fact
from kiln.changes import link_collisions, plan
from kiln.changes.links import overlaps
from tests.support.day_two import assert_updates, deploy_plan
from tests.support.specs import MINIMAL_SPEC, changed

# The slow tier (`make test-slow`; .ci/run runs both): this module synthesizes four specs.
pytestmark = pytest.mark.slow

LINKS_PAGE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/create-dra-linked-data-repo.html"
PERSISTENT = changed(MINIMAL_SPEC, storage__lustre__efa=False)
SCRATCH = changed(MINIMAL_SPEC, storage__lustre__deployment="SCRATCH_2")
DATASETS = "s3://datasets-bucket/tokens"


def _steps(stack: str) -> str:
    return (
        "delete the old link first (`aws fsx describe-data-repository-associations --filters "
        f"Name=file-system-id,Values=<the FileSystemId output of {stack}>` names it; `aws fsx "
        "delete-data-repository-association --association-id <its dra- id> --no-delete-data-in-file-system` keeps its "
        "files), then deploy, or leave this change out"
    )


def _refusal(lines: list[str]) -> str:
    (line,) = [line for line in lines if "(AWS::FSx::DataRepositoryAssociation)" in line]
    return line


def test_a_new_import_path_on_a_persistent_file_system_is_refused_with_the_steps_that_work() -> None:
    result = deploy_plan(PERSISTENT, changed(PERSISTENT, storage__lustre__data_repository__import_path=DATASETS))
    assert result.refused
    line = _refusal(result.findings())
    assert line.startswith("t-storage LustreDataRepository")
    assert line.endswith(
        "(AWS::FSx::DataRepositoryAssociation) would be replaced by a link on / while the old one still links / of "
        "the same file system: CloudFormation creates a link before it deletes the one it replaces, and FSx takes no "
        f"second link on an overlapping directory (/ only as a file system's one link; {LINKS_PAGE}), so the create "
        "fails and rolls the deploy back; the old link is kept (Retain), so every later deploy fails the same way "
        f"until it is deleted; {_steps('t-storage')}"
    )
    # The file system itself is kept and updated: the link is the only refusal.
    assert [finding for finding in result.findings() if finding != line] == []


def test_a_new_import_path_on_a_scratch_file_system_is_refused_and_its_old_link_goes_with_the_deploy() -> None:
    result = deploy_plan(SCRATCH, changed(SCRATCH, storage__lustre__data_repository__import_path=DATASETS))
    line = _refusal(result.findings())
    assert "rolls the deploy back; delete the old link first" in line
    assert "kept (Retain)" not in line


def test_changes_that_keep_the_link_or_make_a_new_file_system_deploy() -> None:
    # Auto-export off is an update of the link in place.
    assert_updates(PERSISTENT, changed(PERSISTENT, storage__lustre__data_repository__export=False))
    # A new file system (another deployment type) gets a new link on its own '/': no link refusal.
    result = deploy_plan(PERSISTENT, changed(PERSISTENT, storage__lustre__deployment="SCRATCH_2"))
    assert result.links == ()


def test_kiln_diff_prints_the_refusal_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kiln.cli.main import main

    before, after = tmp_path / "before.yaml", tmp_path / "after.yaml"
    before.write_text(yaml.safe_dump(PERSISTENT))
    after.write_text(yaml.safe_dump(changed(PERSISTENT, storage__lustre__data_repository__import_path=DATASETS)))
    code = main(["diff", "--spec", str(after), "--before", str(before)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert _refusal(out).endswith(_steps("t-storage"))
    assert out[-1] == f"kiln diff: 3 stacks compared with {before}; refused by CloudFormation"


# The rule on templates alone.


def _link(path: str, *, file_system: Any = None, repository: str = "s3://data/", retain: bool = False) -> dict:
    resource: dict[str, Any] = {
        "Type": "AWS::FSx::DataRepositoryAssociation",
        "Properties": {
            "FileSystemId": file_system or {"Ref": "Lustre"},
            "FileSystemPath": path,
            "DataRepositoryPath": repository,
        },
    }
    if retain:
        resource |= {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
    return resource


FILE_SYSTEM = {"Type": "AWS::FSx::FileSystem", "Properties": {"FileSystemType": "LUSTRE", "SubnetIds": ["subnet-1"]}}


def test_the_rule_comes_from_fsxs_page() -> None:
    fact = service_fact("fsx_lustre", "data_repository_links")
    assert fact.source == LINKS_PAGE
    assert (fact.value["root"], fact.value["root_alone"], fact.value["paths_overlap"]) == ("/", True, False)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("/", "/data", True),
        ("/ns1", "/ns1/ns2/", True),
        ("/ns1/", "/ns1", True),
        ("/ns1", "/ns2", False),
        ("/ns1", "/ns10", False),
    ],
)
def test_paths_overlap_as_fsx_judges_them(a: str, b: str, overlap: bool) -> None:
    assert overlaps(a, b) is overlap and overlaps(b, a) is overlap


def test_a_link_added_beside_a_kept_one_on_its_own_directory_deploys() -> None:
    before = {"Resources": {"Lustre": FILE_SYSTEM, "Data": _link("/data")}}
    after = {"Resources": {"Lustre": FILE_SYSTEM, "Data": _link("/data"), "Sets": _link("/sets", repository="s3://x/")}}
    result = plan({"s": before}, {"s": after})
    assert result.actions["s"]["Sets"] == "create" and not result.refused


def test_a_link_added_inside_a_kept_ones_directory_or_made_after_a_dropped_one_is_refused() -> None:
    before = {"Resources": {"Lustre": FILE_SYSTEM, "Root": _link("/", retain=True)}}
    inside = {"Resources": {"Lustre": FILE_SYSTEM, "Root": _link("/", retain=True), "Sets": _link("/sets")}}
    (found,) = link_collisions(before["Resources"], inside["Resources"], {"Sets": "create", "Root": "same"}, stack="s")
    assert (found.logical_id, found.holder, found.replacing, found.kept) == ("Sets", "Root", False, False)
    assert found.line().startswith(
        "s Sets (AWS::FSx::DataRepositoryAssociation) would link /sets while Root still links / of it:"
    )
    # A link that leaves the template with DeletionPolicy Retain stays: it holds '/' for good.
    moved = {"Resources": {"Lustre": FILE_SYSTEM, "Other": _link("/")}}
    result = plan({"s": before}, {"s": moved})
    (found,) = result.links
    assert (found.holder, found.kept) == ("Root", True)
    assert result.refused


def test_a_link_on_a_file_system_only_known_at_deploy_or_on_another_one_is_not_judged() -> None:
    before = {"Resources": {"Root": _link("/", file_system="fs-0123456789abcdef0")}}
    other = {"Resources": {"Root": _link("/", file_system="fs-0123456789abcdef1")}}
    assert link_collisions(before["Resources"], other["Resources"], {"Root": "replace"}) == []
    unknown = {"Resources": {"Root": _link({"Ref": "Path"}, file_system="fs-0123456789abcdef0")}}
    assert link_collisions(before["Resources"], unknown["Resources"], {"Root": "replace"}) == []
