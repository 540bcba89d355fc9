"""FSx for Lustre's security groups hold exactly the rules AWS's access-control page asks for (platforms.json,
fsx_lustre.security_group_rules): TCP 988 and 1018-1023 among the file servers, both ways between them and their
clients, and among the clients; no address range, no other group, no other port."""

from __future__ import annotations

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from kiln.catalog.platforms import service_fact
from kiln.constructs import (
    LustreFileSystem,
    LustreFileSystemAttributes,
    LustreFileSystemProps,
)
from tests.support.constructs import efa_network, logical_id, stack

RULES = service_fact("fsx_lustre", "security_group_rules")
PORTS = {tuple(pair) for pair in RULES.value["ports"]}


@pytest.fixture(scope="module")
def groups() -> dict:
    st = stack("LustreGroups")
    network = efa_network(st, "us-east-1a", None)
    vpc, subnet = network.net.vpc, network.net.compute_subnet
    efa = LustreFileSystem(
        st,
        "EfaLustre",
        LustreFileSystemProps(vpc=vpc, subnet=subnet, efa=True, efa_security_group=network.efa.security_group),
    )
    efa_clients = ec2.SecurityGroup(st, "EfaClients", vpc=vpc, description="clients")
    efa.allow_from(efa_clients)
    # A client group that allows no outbound traffic but what is added: it gets the page's outbound rules too.
    scratch = LustreFileSystem(st, "Scratch", LustreFileSystemProps(vpc=vpc, subnet=subnet, deployment="SCRATCH_2"))
    closed = ec2.SecurityGroup(st, "ClosedClients", vpc=vpc, description="clients", allow_all_outbound=False)
    scratch.allow_from(closed)
    # A file system made elsewhere, whose servers' group kiln is given.
    servers = ec2.SecurityGroup(st, "ElsewhereServers", vpc=vpc, description="servers")
    elsewhere = LustreFileSystem.from_lustre_attributes(
        st,
        "Elsewhere",
        LustreFileSystemAttributes(
            file_system_id="fs-0123456789abcdef0", dns_name="fs.example", mount_name="abcdefgh", security_group=servers
        ),
    )
    elsewhere_clients = ec2.SecurityGroup(st, "ElsewhereClients", vpc=vpc, description="clients")
    elsewhere.allow_from(elsewhere_clients)
    ids = {
        key: logical_id(group.node.default_child)
        for key, group in {
            "efa_servers": efa.security_group,
            "efa_clients": efa_clients,
            "scratch_servers": scratch.security_group,
            "closed_clients": closed,
            "elsewhere_servers": servers,
            "elsewhere_clients": elsewhere_clients,
            "efa_group": network.efa.security_group,
        }.items()
    }
    return {"ids": ids, "resources": Template.from_stack(st).to_json()["Resources"]}


def _peer(rule: dict, key: str) -> str:
    """Return the group a rule names (its logical id) or the address range it opens."""
    if key in rule:
        return rule[key]["Fn::GetAtt"][0]
    return rule.get("CidrIp") or rule.get("CidrIpv6") or rule.get("DestinationPrefixListId") or "?"


def _rules(groups: dict, name: str, direction: str) -> set[tuple[str, str, int, int]]:
    """Return every (protocol, peer, from, to) of group NAME's inbound (ingress) or outbound (egress) rules, inline
    or standalone."""
    resources, group = groups["resources"], groups["ids"][name]
    peer_key = "SourceSecurityGroupId" if direction == "ingress" else "DestinationSecurityGroupId"
    kind = "AWS::EC2::SecurityGroupIngress" if direction == "ingress" else "AWS::EC2::SecurityGroupEgress"
    inline = resources[group]["Properties"].get(
        "SecurityGroupIngress" if direction == "ingress" else "SecurityGroupEgress", []
    )
    standalone = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == kind and r["Properties"]["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
    ]
    return {
        (r["IpProtocol"], _peer(r, peer_key), r.get("FromPort", -1), r.get("ToPort", -1)) for r in inline + standalone
    }


def _expected(groups: dict, peers: list[str]) -> set[tuple[str, str, int, int]]:
    return {("tcp", groups["ids"][peer], low, high) for peer in peers for low, high in PORTS}


@pytest.mark.parametrize("pair", ["efa", "scratch", "elsewhere"])
def test_file_servers_admit_themselves_and_their_clients_on_the_lustre_ports_only(groups, pair: str) -> None:
    assert {(988, 988), (1018, 1023)} == PORTS
    assert RULES.source == "https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html"
    clients = {"efa": "efa_clients", "scratch": "closed_clients", "elsewhere": "elsewhere_clients"}[pair]
    roles = {"file_servers": f"{pair}_servers", "clients": clients}
    expected = _expected(groups, [roles[role] for role in RULES.value["file_servers_admit"]])
    if pair == "elsewhere":
        # A group made elsewhere keeps its own rules among its servers; kiln adds the clients' only.
        expected = _expected(groups, [clients])
    assert _rules(groups, f"{pair}_servers", "ingress") == expected


@pytest.mark.parametrize(
    ("clients", "servers"),
    [("efa_clients", "efa_servers"), ("closed_clients", "scratch_servers"), ("elsewhere_clients", "elsewhere_servers")],
)
def test_clients_admit_each_other_and_the_file_servers_on_the_lustre_ports_only(groups, clients, servers) -> None:
    roles = {"file_servers": servers, "clients": clients}
    expected = _expected(groups, [roles[role] for role in RULES.value["clients_admit"]])
    assert _rules(groups, clients, "ingress") == expected


def test_a_client_group_that_restricts_outbound_traffic_reaches_exactly_what_the_page_lists(groups) -> None:
    roles = {"file_servers": "scratch_servers", "clients": "closed_clients"}
    expected = _expected(groups, [roles[role] for role in RULES.value["clients_admit"]])
    assert _rules(groups, "closed_clients", "egress") == expected


def test_no_lustre_rule_opens_an_address_range(groups) -> None:
    lustre_groups = [name for name in groups["ids"] if name != "efa_group"]
    for name in lustre_groups:
        for _, peer, _, _ in _rules(groups, name, "ingress"):
            assert peer in groups["ids"].values(), (name, peer)


def test_an_efa_file_system_also_carries_the_efa_group_which_admits_only_its_members(groups) -> None:
    resources, ids = groups["resources"], groups["ids"]
    (fs,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::FSx::FileSystem" and r["Properties"]["LustreConfiguration"].get("EfaEnabled")
    ]
    assert fs["Properties"]["SecurityGroupIds"] == [
        {"Fn::GetAtt": [ids["efa_servers"], "GroupId"]},
        {"Fn::GetAtt": [ids["efa_group"], "GroupId"]},
    ]
    assert _rules(groups, "efa_group", "ingress") == {("-1", ids["efa_group"], -1, -1)}
