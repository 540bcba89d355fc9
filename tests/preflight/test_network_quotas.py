"""The network quotas check: what a deploy takes of the VPC, internet gateway, Elastic IP and NAT gateway quotas,
against what the moto account holds (issue 46, item 7: the fifth destroy and deploy of a PERSISTENT_2 cluster)."""

from __future__ import annotations

import pytest

from kiln.catalog.platforms import service_fact
from kiln.preflight.checks import network_quotas
from kiln.preflight.checks.network_quotas import needs, quotas
from kiln.preflight.run import run_check
from tests.support.fake_aws import REGION
from tests.support.preflight import AZ, client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

KEPT = {"network": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0", "kept": True}}
EXISTING = {
    "network": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"},
}


def _expect(stubber, keys: list[str], values: dict[str, float] | None = None) -> None:
    """Answer GetServiceQuota for each of KEYS in turn, with VALUES (else the documented default)."""
    for key in keys:
        quota = quotas()[key]
        value = (values or {}).get(key, quota.default)
        codes = {"ServiceCode": quota.service_code, "QuotaCode": quota.quota_code}
        answer = {**codes, "QuotaName": quota.name, "Value": value}
        stubber.add_response("get_service_quota", {"Quota": answer}, codes)


def _fill(aws, vpcs: int = 0, addresses: int = 0, nat_zone: str | None = None, nats: int = 0) -> None:
    """Make VPCS more VPCs, ADDRESSES Elastic IPs and NATS NAT gateways in NAT_ZONE in the moto account."""
    for _ in range(vpcs):
        aws.ec2.create_vpc(CidrBlock="10.9.0.0/16")
    for _ in range(addresses):
        aws.ec2.allocate_address(Domain="vpc")
    if nats:
        vpc = aws.ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
        subnet = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.0.0/24", AvailabilityZone=nat_zone)["Subnet"]
        for _ in range(nats):
            allocation = aws.ec2.allocate_address(Domain="vpc")["AllocationId"]
            aws.ec2.create_nat_gateway(SubnetId=subnet["SubnetId"], AllocationId=allocation)


def test_the_codes_and_defaults_are_the_vpc_quotas_pages() -> None:
    fact = service_fact("vpc", "quotas")
    assert fact.source == "https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html"
    assert {key: (q.service_code, q.quota_code, q.default) for key, q in quotas().items()} == {
        "vpcs": ("vpc", "L-F678F1CE", 5),
        "internet_gateways": ("vpc", "L-A4707A72", 5),
        "elastic_ips": ("ec2", "L-0263D0A3", 5),
        "nat_gateways": ("vpc", "L-FE5A380F", 5),
    }


def test_a_new_vpc_takes_one_of_each_a_kept_one_all_but_the_vpc_an_existing_one_none() -> None:
    egress = {"internet_gateways": 1, "elastic_ips": 1, "nat_gateways": 1}
    assert needs(make_plan()) == {"vpcs": 1, **egress}
    assert needs(make_plan(**KEPT)) == egress
    assert needs(make_plan(**EXISTING)) == {}


def test_the_fifth_new_vpc_fails_on_the_vpc_quota_with_the_kept_vpcs_named(aws) -> None:
    # The default VPC and the VPCs of four earlier destroys: the quota's 5 are taken.
    _fill(aws, vpcs=4)
    clients, stubber = stubbed(aws, "service_quotas")
    _expect(stubber, ["vpcs", "internet_gateways", "elastic_ips", "nat_gateways"])
    with stubber:
        found = run_check(network_quotas.CHECK, make_plan(), clients)
    stubber.assert_no_pending_responses()
    by_subject = {f.subject: f for f in found}
    vpcs = by_subject["VPCs per Region"]
    assert vpcs.status == "fail"
    assert vpcs.message == "the deploy makes 1, 5 in use, quota 5 (L-F678F1CE, applied)"
    assert vpcs.remedy.startswith(f"request at least 6 for L-F678F1CE in Service Quotas (vpc, {REGION}).")
    assert "network.kept" in vpcs.remedy and "kiln leftovers --spec" in vpcs.remedy
    assert [f.status for s, f in by_subject.items() if s != "VPCs per Region"] == ["ok", "ok", "ok"]
    assert by_subject[f"NAT gateways per Availability Zone (in {AZ})"].message.startswith(
        "the deploy makes 1, 0 in use"
    )


def test_a_kept_vpc_adopted_again_asks_no_vpc_and_elastic_ips_and_nat_gateways_count(aws) -> None:
    _fill(aws, vpcs=4, addresses=1, nat_zone=AZ, nats=4)
    clients, stubber = stubbed(aws, "service_quotas")
    _expect(stubber, ["internet_gateways", "elastic_ips", "nat_gateways"])
    with stubber:
        found = run_check(network_quotas.CHECK, make_plan(**KEPT), clients)
    assert [(f.subject, f.status) for f in found] == [
        ("Internet gateways per Region", "ok"),
        # One address of its own and the four NAT gateways' addresses.
        ("Elastic IP addresses per Region", "fail"),
        (f"NAT gateways per Availability Zone (in {AZ})", "ok"),
    ]
    assert found[1].message == "the deploy makes 1, 5 in use, quota 5 (L-0263D0A3, applied)"
    assert found[1].remedy.startswith(f"request at least 6 for L-0263D0A3 in Service Quotas (ec2, {REGION}).")
    assert found[2].message == "the deploy makes 1, 4 in use, quota 5 (L-FE5A380F, applied)"


def test_nat_gateways_of_another_az_leave_the_compute_az_room(aws) -> None:
    _fill(aws, nat_zone=f"{REGION}b", nats=5)
    clients, stubber = stubbed(aws, "service_quotas")
    _expect(stubber, ["internet_gateways", "elastic_ips", "nat_gateways"], {"elastic_ips": 10})
    with stubber:
        found = run_check(network_quotas.CHECK, make_plan(**KEPT), clients)
    nat = found[-1]
    assert (nat.subject, nat.status) == (f"NAT gateways per Availability Zone (in {AZ})", "ok")
    assert nat.message == "the deploy makes 1, 0 in use, quota 5 (L-FE5A380F, applied)"


def test_a_deleted_nat_gateway_uses_no_quota(aws) -> None:
    _fill(aws, nat_zone=AZ, nats=5)
    for gateway in aws.ec2.describe_nat_gateways()["NatGateways"]:
        aws.ec2.delete_nat_gateway(NatGatewayId=gateway["NatGatewayId"])
    counted = network_quotas._nat_gateways_by_zone(aws)
    states = {g["State"] for g in aws.ec2.describe_nat_gateways()["NatGateways"]}
    # moto deletes at once; AWS passes through deleting, which counts (platforms.json, vpc.nat_gateway_counted_states).
    assert states == {"deleted"}
    assert counted[AZ] == 0


def test_service_quotas_refusing_falls_back_to_the_documented_default_and_says_so(aws) -> None:
    _fill(aws, vpcs=4)
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("get_service_quota", **client_error("AccessDeniedException"))
    _expect(stubber, ["internet_gateways", "elastic_ips", "nat_gateways"])
    with stubber:
        found = run_check(network_quotas.CHECK, make_plan(), clients)
    assert found[0].status == "fail"
    assert found[0].message == (
        "the deploy makes 1, 5 in use, quota 5 (L-F678F1CE, documented default: Service Quotas refused the call "
        "(AccessDeniedException))"
    )


def test_an_unapplied_quota_reads_aws_default(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("get_service_quota", **client_error("NoSuchResourceException"))
    quota = quotas()["vpcs"]
    codes = {"ServiceCode": quota.service_code, "QuotaCode": quota.quota_code}
    stubber.add_response("get_aws_default_service_quota", {"Quota": {**codes, "Value": 7.0}}, codes)
    with stubber:
        assert network_quotas.quota_value(clients, quota) == (7.0, "AWS's default")


@pytest.mark.parametrize("code", ["ThrottlingException", "ServiceException"])
def test_other_refusals_are_unchecked_not_a_guess(aws, code: str) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("get_service_quota", **client_error(code))
    with stubber:
        (found,) = run_check(network_quotas.CHECK, make_plan(**KEPT), clients)[:1]
    assert found.status == "unchecked"


def test_an_existing_vpc_takes_nothing(aws) -> None:
    (found,) = run_check(network_quotas.CHECK, make_plan(**EXISTING), aws)
    assert found.status == "ok"
    assert found.message == (
        "the cluster uses existing vpc-0123456789abcdef0: the deploy makes no VPC, gateway or Elastic IP"
    )
