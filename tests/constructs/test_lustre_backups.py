"""Backups of FSx for Lustre (issue 46, item 8): FSx backs up persistent file systems that are not linked to S3
(platforms.json, fsx_lustre.backups), so a linked file system asks for none, and asking for one is one clear line."""

from __future__ import annotations

import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from kiln.catalog.platforms import service_fact
from kiln.changes import plan
from kiln.constructs import DataRepositoryLink, LustreFileSystem, LustreFileSystemProps
from kiln.constructs._checks import PropError
from tests.support.constructs import imported_vpc, stack

BACKUPS_PAGE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html"


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    """The LustreConfiguration of each kind of file system, from one stack."""
    st = stack("Backups")
    vpc = imported_vpc(st)
    link = DataRepositoryLink(bucket=s3.Bucket.from_bucket_name(st, "Bucket", "kiln-test-data"))
    kinds = {
        "linked": {"data_repository": link},
        "unlinked": {},
        "month": {"backup_retention_days": 30},
        "scratch": {"deployment": "SCRATCH_2", "retain": False, "data_repository": link},
    }
    systems = {
        name: LustreFileSystem(st, name, LustreFileSystemProps(vpc=vpc, subnet=vpc.private_subnets[0], **props))
        for name, props in kinds.items()
    }
    resources = Template.from_stack(st).find_resources("AWS::FSx::FileSystem")
    return {
        name: resources[st.get_logical_id(fs.file_system.node.default_child)]["Properties"]["LustreConfiguration"]
        for name, fs in systems.items()
    }


def test_the_rule_is_fsxs_with_its_page() -> None:
    fact = service_fact("fsx_lustre", "backups")
    assert fact.source == BACKUPS_PAGE
    assert fact.value == {"deployments": ["PERSISTENT_1", "PERSISTENT_2"], "linked_to_s3": False, "off": 0}


def test_a_linked_persistent_file_system_turns_backups_off_and_sets_no_backup_window(configs) -> None:
    config = configs["linked"]
    assert config["AutomaticBackupRetentionDays"] == 0
    assert "DailyAutomaticBackupStartTime" not in config
    # Create-only, and asks for no backup: it stays, so no deployed file system is replaced for it.
    assert config["CopyTagsToBackups"] is True


def test_a_linked_file_system_deployed_with_a_week_of_backups_is_updated_in_place(configs) -> None:
    after = {"FileSystemType": "LUSTRE", "SubnetIds": ["subnet-1"], "LustreConfiguration": configs["linked"]}
    # What kiln's earlier releases deployed: a week of backups, tags copied to them, at 03:00.
    backups = {"AutomaticBackupRetentionDays": 7, "CopyTagsToBackups": True, "DailyAutomaticBackupStartTime": "03:00"}
    week = {**configs["linked"], **backups}
    before = {**after, "LustreConfiguration": week}
    result = plan(
        {"s": {"Resources": {"Lustre": {"Type": "AWS::FSx::FileSystem", "Properties": before}}}},
        {"s": {"Resources": {"Lustre": {"Type": "AWS::FSx::FileSystem", "Properties": after}}}},
    )
    assert result.actions["s"]["Lustre"] == "update" and result.findings() == []


def test_an_unlinked_persistent_file_system_is_backed_up_daily_for_a_week(configs) -> None:
    config = configs["unlinked"]
    assert (config["AutomaticBackupRetentionDays"], config["CopyTagsToBackups"]) == (7, True)
    assert config["DailyAutomaticBackupStartTime"] == "03:00"
    assert configs["month"]["AutomaticBackupRetentionDays"] == 30


def test_a_scratch_file_system_asks_for_no_backup(configs) -> None:
    config = configs["scratch"]
    assert not {"AutomaticBackupRetentionDays", "CopyTagsToBackups", "DailyAutomaticBackupStartTime"} & set(config)


def test_backups_of_a_linked_file_system_are_refused_in_one_line() -> None:
    link = DataRepositoryLink(bucket=s3.Bucket.from_bucket_name(stack("Data"), "Bucket", "kiln-test-data"))
    with pytest.raises(PropError) as refused:
        LustreFileSystemProps(vpc=None, subnet=None, data_repository=link, backup_retention_days=7)
    assert str(refused.value) == (
        "LustreFileSystemProps.backup_retention_days: got 7; allowed: 0 with a data_repository: FSx backs up no file "
        f"system linked to S3 ({BACKUPS_PAGE})"
    )
    # Off is what FSx asks of a linked file system: said outright, it is no error.
    assert LustreFileSystemProps(vpc=None, subnet=None, data_repository=link, backup_retention_days=0)
