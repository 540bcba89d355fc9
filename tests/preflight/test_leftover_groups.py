"""Kept Lustre groups that name each other (the file servers' group admits the clients' and the clients' group the file
servers', as FSx's access-control page asks: platforms.json, fsx_lustre.security_group_rules) are deleted by
commands that run in the order `kiln leftovers` prints them: each group's rules naming a group deleted before it
are revoked first."""

from __future__ import annotations

import json
import shlex

import pytest

from kiln.catalog.platforms import service_fact
from kiln.contracts.tags import TAG_CLUSTER
from kiln.preflight.checks import leftovers
from tests.support.preflight import make_plan

# The slow tier (`make test-slow`): moto's account setup and the leftovers search take over 14 s on 2 cores.
pytestmark = pytest.mark.slow

PORTS = service_fact("fsx_lustre", "security_group_rules").value["ports"]


def _kept_lustre_groups(aws) -> tuple[str, str]:
    """Make in moto the two groups a kept file system leaves, tagged as cluster pf's, with kiln's rules."""
    ec2 = aws.ec2
    tags = [{"ResourceType": "security-group", "Tags": [{"Key": TAG_CLUSTER, "Value": "pf"}]}]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    servers, clients = (
        ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc, TagSpecifications=tags)["GroupId"]
        for name in ("servers", "clients")
    )
    for group, peers in ((servers, (servers, clients)), (clients, (clients, servers))):
        ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": low, "ToPort": high, "UserIdGroupPairs": [{"GroupId": peer}]}
                for low, high in PORTS
                for peer in peers
            ],
        )
    return servers, clients


def _run(aws, command: str) -> None:
    """Run one printed `aws ec2 ...` command against moto through boto3."""
    words = shlex.split(command.split("  #", 1)[0])
    assert words[:2] == ["aws", "ec2"]
    options = dict(zip(words[3::2], words[4::2], strict=True))
    group = options["--group-id"]
    if words[2] == "delete-security-group":
        aws.ec2.delete_security_group(GroupId=group)
        return
    permissions = json.loads(options["--ip-permissions"])
    {
        "revoke-security-group-ingress": aws.ec2.revoke_security_group_ingress,
        "revoke-security-group-egress": aws.ec2.revoke_security_group_egress,
    }[words[2]](GroupId=group, IpPermissions=permissions)


def test_groups_that_name_each_other_revoke_those_rules_before_each_delete(aws) -> None:
    servers, clients = _kept_lustre_groups(aws)
    found = leftovers.find_leftovers(make_plan(storage={"lustre": {"deployment": "PERSISTENT_2"}}), aws)
    groups = [item for item in found if item.kind == "security group"]
    assert {item.ident for item in groups} == {servers, clients}
    first, second = groups
    # The first group goes once the second's rules naming it are revoked; the second then names nothing kept.
    assert [command.split(" --")[0] for command in first.delete] == [
        "aws ec2 revoke-security-group-ingress",
        "aws ec2 delete-security-group",
    ]
    assert f"--group-id {second.ident} " in first.delete[0]
    assert len(second.delete) == 1 and second.delete[0].startswith("aws ec2 delete-security-group")
    for command in (*first.delete, *second.delete):
        _run(aws, command)
    assert not aws.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [servers, clients]}])[
        "SecurityGroups"
    ]
