"""The lustre check: FSx for Lustre storage and file-system quotas against moto's file systems in use.

Service Quotas answers through a Stubber (moto has no fsx quotas). The quota names are made up in the shape the
check matches ("Lustre Persistent_2 storage capacity (250 MBps/TiB)"); they were not read from a live account.
"""

from __future__ import annotations

import pytest

from kiln.preflight.checks import lustre
from kiln.preflight.run import run_check
from tests.support.preflight import client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

SUBNET = "subnet-0123456789abcdef0"
PERSISTENT = {"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}}  # 250 MB/s/TiB by default
SCRATCH = {"lustre": {"deployment": "SCRATCH_2", "storage_gib": 1200}}
FILE_SYSTEMS = "Lustre file systems"
SCRATCH_STORAGE = "Lustre Scratch storage capacity"
PERSISTENT_2_STORAGE = "Lustre Persistent_2 storage capacity"


def quota(code: str, value: float, name: str) -> dict:
    return {"ServiceCode": "fsx", "QuotaCode": code, "QuotaName": name, "Value": float(value)}


def tiered(value: float, *tiers: int) -> list[dict]:
    """Return one Persistent_2 storage quota per tier, each worth VALUE GiB."""
    return [quota(f"L-T{tier}", value, f"{PERSISTENT_2_STORAGE} ({tier} MBps/TiB)") for tier in tiers]


def expect_listing(stubber, operation: str, quotas: list[dict]) -> None:
    stubber.add_response(operation, {"Quotas": quotas}, {"ServiceCode": "fsx", "MaxResults": 100})


def create(aws, deployment: str, gib: int, tier: int | None = None, kind: str = "LUSTRE") -> None:
    """Create a file system in moto: Lustre of DEPLOYMENT (and TIER), or another KIND."""
    more: dict = {}
    if kind == "LUSTRE":
        config = {"DeploymentType": deployment}
        more["LustreConfiguration"] = config | ({"PerUnitStorageThroughput": tier} if tier else {})
    aws.fsx.create_file_system(FileSystemType=kind, StorageCapacity=gib, StorageType="SSD", SubnetIds=[SUBNET], **more)


def run(aws, plan, *listings: tuple[str, list[dict]]):
    """Return the check's findings with Service Quotas answering LISTINGS in order, all of them used."""
    clients, stubber = stubbed(aws, "service_quotas")
    for operation, quotas in listings:
        expect_listing(stubber, operation, quotas)
    with stubber:
        findings = lustre.check(plan, clients)
    stubber.assert_no_pending_responses()
    return findings


def test_no_lustre_needs_no_call(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    with stubber:
        (finding,) = lustre.check(make_plan(), clients)
    assert finding.line() == "OK        lustre: storage.lustre: no Lustre file system"


@pytest.mark.parametrize(
    ("name", "deployment", "expected"),
    [
        ("Lustre Persistent_2 storage capacity", "PERSISTENT_2", True),
        ("Lustre Persistent 2 storage capacity (1000 MBps/TiB)", "PERSISTENT_2", True),
        ("lustre persistent-2 SSD STORAGE CAPACITY", "PERSISTENT_2", True),
        ("Lustre Persistent_1 storage capacity", "PERSISTENT_2", False),
        ("Lustre Persistent storage capacity", "PERSISTENT_2", False),
        ("Lustre Persistent_2 Intelligent-Tiering storage capacity", "PERSISTENT_2", False),
        ("Lustre Persistent_2 throughput capacity", "PERSISTENT_2", False),
        ("ONTAP Persistent_2 storage capacity", "PERSISTENT_2", False),
        ("Lustre Scratch storage capacity", "SCRATCH_2", True),
        ("Lustre Scratch_2 storage capacity", "SCRATCH_2", True),
        ("Lustre Scratch_1 storage capacity", "SCRATCH_2", False),
        ("Lustre Persistent_1 HDD storage capacity (12 MBps/TiB)", "PERSISTENT_2", False),
    ],
)
def test_storage_quota_names(name: str, deployment: str, expected: bool) -> None:
    assert lustre.is_storage_quota(name, deployment) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (PERSISTENT_2_STORAGE, frozenset()),
        (f"{PERSISTENT_2_STORAGE} (125 MBps/TiB)", frozenset({125})),
        (f"{PERSISTENT_2_STORAGE} 1000 MB/s/TiB", frozenset({1000})),
        ("Lustre Persistent_1 storage capacity (50 MBps/TiB)", frozenset()),
    ],
)
def test_throughput_tiers_in_names(name: str, expected: frozenset) -> None:
    assert lustre.tiers(name) == expected


def test_file_system_count_and_scratch_generation_names() -> None:
    assert lustre.is_file_systems_quota(FILE_SYSTEMS)
    assert not lustre.is_file_systems_quota("Lustre file systems storage capacity")
    assert not lustre.is_file_systems_quota("Lustre backups per file system")
    assert not lustre.is_file_systems_quota("ONTAP file systems")
    assert lustre.counted_deployments(SCRATCH_STORAGE, "SCRATCH_2") == ("SCRATCH_1", "SCRATCH_2")
    assert lustre.counted_deployments("Lustre Scratch_2 storage capacity", "SCRATCH_2") == ("SCRATCH_2",)
    assert lustre.counted_deployments(PERSISTENT_2_STORAGE, "PERSISTENT_2") == ("PERSISTENT_2",)


def test_the_plans_tier_quota_counts_that_tier_in_use(aws) -> None:
    create(aws, "PERSISTENT_2", 2400, 250)
    create(aws, "PERSISTENT_2", 4800, 125)  # another tier's quota
    create(aws, "SCRATCH_2", 1200)
    listed = [*tiered(4800, 125, 250, 500, 1000), quota("L-FS", 100, FILE_SYSTEMS)]
    findings = run(aws, make_plan(storage=PERSISTENT), ("list_service_quotas", listed))
    assert [f.line() for f in findings] == [
        "OK        lustre: Lustre Persistent_2 storage capacity (250 MBps/TiB): needs 2400 GiB (storage.lustre "
        "PERSISTENT_2, 250 MB/s/TiB), 2400 GiB in use by 1 file system(s) it counts, quota 4800 GiB (L-T250)",
        "OK        lustre: Lustre file systems: needs 1 more Lustre file system, 3 in use, quota 100 (L-FS)",
    ]


def test_too_little_storage_quota_fails_with_the_value_to_request(aws) -> None:
    create(aws, "PERSISTENT_2", 2400, 250)
    (finding,) = run(aws, make_plan(storage=PERSISTENT), ("list_service_quotas", tiered(3600, 125, 250)))
    assert finding.status == "fail"
    assert finding.message.endswith("2400 GiB in use by 1 file system(s) it counts, quota 3600 GiB (L-T250)")
    assert finding.remedy == "request at least 4800 GiB for L-T250 in Service Quotas (fsx, us-east-1)"


def test_a_quota_naming_no_tier_counts_every_tier(aws) -> None:
    create(aws, "PERSISTENT_2", 2400, 250)
    create(aws, "PERSISTENT_2", 4800, 1000)
    create(aws, "", 9600, kind="WINDOWS")  # not Lustre: counts nowhere here
    listed = [quota("L-P2", 8000, PERSISTENT_2_STORAGE)]
    (finding,) = run(aws, make_plan(storage=PERSISTENT), ("list_service_quotas", listed))
    assert finding.status == "fail"
    assert "7200 GiB in use by 2 file system(s)" in finding.message
    assert finding.remedy == "request at least 9600 GiB for L-P2 in Service Quotas (fsx, us-east-1)"


def test_a_tier_without_its_quota_warns(aws) -> None:
    plan = make_plan(
        storage={"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400, "throughput_per_tib": 1000}}
    )
    (finding,) = run(aws, plan, ("list_service_quotas", tiered(4800, 125, 500)))
    assert finding.status == "warn"
    assert finding.subject == "storage.lustre.throughput_per_tib"
    assert "for 125, 500 MB/s/TiB but none for 1000" in finding.message
    assert finding.remedy.startswith("set storage.lustre.throughput_per_tib to one of 125, 500")


def test_a_scratch_quota_counts_both_scratch_generations(aws) -> None:
    create(aws, "SCRATCH_1", 3600)
    create(aws, "SCRATCH_2", 2400)
    create(aws, "PERSISTENT_2", 2400, 250)
    listed = [quota("L-SC", 6000, SCRATCH_STORAGE), *tiered(0, 250)]
    (finding,) = run(aws, make_plan(storage=SCRATCH), ("list_service_quotas", listed))
    assert finding.status == "fail"
    assert finding.message == (
        "needs 1200 GiB (storage.lustre SCRATCH_2), 6000 GiB in use by 2 file system(s) it counts, "
        "quota 6000 GiB (L-SC)"
    )
    assert finding.remedy == "request at least 7200 GiB for L-SC in Service Quotas (fsx, us-east-1)"


def test_the_defaults_answer_when_nothing_is_applied(aws) -> None:
    defaults = [*tiered(4800, 250), quota("L-FS", 100, FILE_SYSTEMS)]
    findings = run(
        aws, make_plan(storage=PERSISTENT), ("list_service_quotas", []), ("list_aws_default_service_quotas", defaults)
    )
    assert [(f.subject, f.status) for f in findings] == [
        ("Lustre Persistent_2 storage capacity (250 MBps/TiB)", "ok"),
        (FILE_SYSTEMS, "ok"),
    ]


def test_too_many_file_systems_fail(aws) -> None:
    create(aws, "PERSISTENT_2", 2400, 125)
    create(aws, "SCRATCH_1", 1200)
    listed = [*tiered(100800, 250), quota("L-FS", 2, FILE_SYSTEMS)]
    _, count = run(aws, make_plan(storage=PERSISTENT), ("list_service_quotas", listed))
    assert count.status == "fail"
    assert count.message == "needs 1 more Lustre file system, 2 in use, quota 2 (L-FS)"
    assert count.remedy == "request at least 3 for L-FS in Service Quotas (fsx, us-east-1)"


def test_a_deployment_type_without_a_quota_warns(aws) -> None:
    listed = [quota("L-FS", 100, FILE_SYSTEMS), quota("L-P1", 100800, "Lustre Persistent_1 storage capacity")]
    findings = run(
        aws,
        make_plan(storage=PERSISTENT),
        ("list_service_quotas", listed),
        ("list_aws_default_service_quotas", listed),
    )
    finding, count = findings
    assert count.subject == FILE_SYSTEMS and count.status == "ok"  # still checked
    assert finding.status == "warn"
    assert finding.subject == "storage.lustre.deployment"
    assert finding.message == (
        "Service Quotas lists 2 Lustre quota(s) in us-east-1 but no PERSISTENT_2 storage capacity quota: "
        "the deployment type may not be offered here"
    )


def test_no_lustre_quota_at_all_is_unchecked(aws) -> None:
    ontap = [quota("L-ON", 100, "ONTAP file systems")]
    findings = run(
        aws,
        make_plan(storage=SCRATCH),
        ("list_service_quotas", ontap),
        ("list_aws_default_service_quotas", []),
    )
    (finding,) = findings
    assert finding.status == "unchecked"
    assert finding.message == "Service Quotas lists no FSx for Lustre quota in us-east-1 (service code fsx)"
    assert "leaves room for 1200 GiB" in finding.remedy and finding.remedy.endswith("pass --skip lustre")


@pytest.mark.parametrize("code", ["AccessDeniedException", "ThrottlingException"])
def test_a_refused_quota_listing_is_one_unchecked_line(aws, code: str) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("list_service_quotas", **client_error(code))
    with stubber:
        (finding,) = run_check(lustre.CHECK, make_plan(storage=PERSISTENT), clients)
    assert finding.status == "unchecked"
    assert "servicequotas:ListServiceQuotas" in finding.message
    if code == "AccessDeniedException":
        assert finding.remedy == (
            "allow servicequotas:ListServiceQuotas (read-only) for the identity running kiln, or pass --skip lustre"
        )
    else:
        assert finding.remedy == "run preflight again in a minute"


def test_a_refused_file_system_listing_names_its_action(aws) -> None:
    clients, stubber = stubbed(aws, "fsx")
    stubber.add_client_error("describe_file_systems", **client_error("AccessDeniedException"))
    with stubber:
        (finding,) = run_check(lustre.CHECK, make_plan(storage=PERSISTENT), clients)
    assert finding.status == "unchecked"
    assert "fsx:DescribeFileSystems" in finding.message and "--skip lustre" in finding.remedy


def test_failed_and_other_file_systems_hold_no_lustre_storage(aws) -> None:
    clients, stubber = stubbed(aws, "fsx")
    lustre_2 = {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250}
    listed = [
        {"FileSystemId": "fs-00000001", "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE", "StorageCapacity": 2400},
        {"FileSystemId": "fs-00000002", "FileSystemType": "LUSTRE", "Lifecycle": "FAILED", "StorageCapacity": 4800},
        {"FileSystemId": "fs-00000003", "FileSystemType": "ONTAP", "Lifecycle": "AVAILABLE", "StorageCapacity": 1024},
    ]
    for fs in listed[:2]:
        fs["LustreConfiguration"] = lustre_2
    stubber.add_response("describe_file_systems", {"FileSystems": listed}, {})
    with stubber:
        found = lustre.lustre_file_systems(clients)
    assert [fs["FileSystemId"] for fs in found] == ["fs-00000001"]
    assert lustre.storage_in_use(found, f"{PERSISTENT_2_STORAGE} (250 MBps/TiB)", "PERSISTENT_2") == (2400, 1)


# An attached file system (storage.lustre.file_system_id): the check reads it instead of the quotas.
FS_ID = "fs-0123456789abcdef0"


def _attach_plan(aws, **lustre):
    """Return a plan attaching FS_ID through a group of a moto VPC (its ids), with LUSTRE's fields changed."""
    vpc = aws.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    clients = aws.ec2.create_security_group(GroupName="clients", Description="Lustre clients", VpcId=vpc)["GroupId"]
    fields = {"file_system_id": FS_ID, "mount_name": "abcdefgh", "security_group_id": clients, **lustre}
    network = {"vpc_id": vpc, "private_subnet_id": subnet["SubnetId"]}
    return make_plan(storage={"lustre": fields}, network=network), vpc, subnet["SubnetId"], clients


def _servers(aws, vpc: str, subnet: str, admits: str | None) -> str:
    """Return an interface in SUBNET whose group admits ADMITS on the Lustre ports (or no one)."""
    group = aws.ec2.create_security_group(GroupName="servers", Description="file servers", VpcId=vpc)["GroupId"]
    if admits:
        aws.ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "UserIdGroupPairs": [{"GroupId": admits}]}
            ],
        )
    eni = aws.ec2.create_network_interface(SubnetId=subnet, Groups=[group])
    return eni["NetworkInterface"]["NetworkInterfaceId"]


def _file_system(vpc: str, subnet: str, eni: str, **more) -> dict:
    """Return DescribeFileSystems' answer for FS_ID as FSx gives it (moto leaves out VpcId, interfaces, mount name)."""
    fs = {
        "FileSystemId": FS_ID,
        "FileSystemType": "LUSTRE",
        "Lifecycle": "AVAILABLE",
        "StorageCapacity": 2400,
        "VpcId": vpc,
        "SubnetIds": [subnet],
        "NetworkInterfaceIds": [eni],
        "DNSName": f"{FS_ID}.fsx.us-east-1.amazonaws.com",
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "MountName": "abcdefgh"},
    }
    return {"FileSystems": [fs | more]}


def _attached(aws, plan, answer: dict):
    clients, stubber = stubbed(aws, "fsx")
    stubber.add_response("describe_file_systems", answer, {"FileSystemIds": [FS_ID]})
    with stubber:
        return lustre.check(plan, clients)


def test_an_attached_file_system_that_admits_its_client_group_is_ready(aws) -> None:
    plan, vpc, subnet, clients = _attach_plan(aws)
    eni = _servers(aws, vpc, subnet, admits=clients)
    fs, group = _attached(aws, plan, _file_system(vpc, subnet, eni))
    assert fs.line() == (
        f"OK        lustre: storage.lustre.file_system_id {FS_ID}: PERSISTENT_2, 2400 GiB: a deploy attaches it, and "
        "kiln neither changes nor deletes it"
    )
    assert (group.status, group.message) == (
        "ok",
        "the file system's groups admit it on TCP 988: nodes join it to mount",
    )


def test_an_attached_file_system_needs_no_quota(aws) -> None:
    plan, vpc, subnet, clients = _attach_plan(aws)
    eni = _servers(aws, vpc, subnet, admits=clients)
    clients_api, quotas = stubbed(aws, "service_quotas")
    clients_api, fsx = stubbed(clients_api, "fsx")
    fsx.add_response("describe_file_systems", _file_system(vpc, subnet, eni))
    with quotas, fsx:
        findings = lustre.check(plan, clients_api)
    quotas.assert_no_pending_responses()
    assert [f.status for f in findings] == ["ok", "ok"]


def test_a_client_group_the_file_system_does_not_admit_is_a_warning(aws) -> None:
    plan, vpc, subnet, _ = _attach_plan(aws)
    eni = _servers(aws, vpc, subnet, admits=None)
    _, group = _attached(aws, plan, _file_system(vpc, subnet, eni))
    assert group.status == "warn" and "names it on TCP 988" in group.message


def test_a_client_group_that_is_missing_or_of_another_vpc_fails(aws) -> None:
    plan, vpc, subnet, _ = _attach_plan(aws, security_group_id="sg-0123456789abcdef0")
    eni = _servers(aws, vpc, subnet, admits=None)
    _, group = _attached(aws, plan, _file_system(vpc, subnet, eni))
    assert (group.status, group.message) == ("fail", "does not exist in us-east-1")
    other = aws.ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    elsewhere = aws.ec2.create_security_group(GroupName="x", Description="x", VpcId=other)["GroupId"]
    plan, vpc, subnet, _ = _attach_plan(aws, security_group_id=elsewhere)
    _, group = _attached(aws, plan, _file_system(vpc, subnet, eni))
    assert group.status == "fail" and group.message.startswith(f"is in {other}, the file system in {vpc}")


def test_an_attached_file_system_that_does_not_fit_fails_with_every_reason(aws) -> None:
    plan, vpc, subnet, clients = _attach_plan(aws)
    eni = _servers(aws, vpc, subnet, admits=clients)
    answer = _file_system(vpc, subnet, eni, VpcId="vpc-0fedcba987654321f", Lifecycle="MISCONFIGURED")
    answer["FileSystems"][0]["LustreConfiguration"]["MountName"] = "zyxwvuts"
    (finding,) = _attached(aws, plan, answer)
    assert finding.status == "fail"
    assert finding.message == (
        "is MISCONFIGURED: nodes mount an AVAILABLE file system; has mount name zyxwvuts, not "
        f"storage.lustre.mount_name abcdefgh; is in vpc-0fedcba987654321f, the cluster in network.vpc_id {vpc}"
    )


def test_an_attached_file_system_that_does_not_exist_fails(aws) -> None:
    plan, *_ = _attach_plan(aws)
    (finding,) = lustre.check(plan, aws)  # moto answers an unknown id with no file system
    assert (finding.status, finding.message) == ("fail", "does not exist in us-east-1")
    clients, stubber = stubbed(aws, "fsx")
    stubber.add_client_error("describe_file_systems", **client_error("FileSystemNotFound"))
    with stubber:
        (finding,) = lustre.check(plan, clients)  # FSx's own answer
    assert finding.status == "fail" and "`kiln leftovers`" in finding.remedy
