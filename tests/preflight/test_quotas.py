"""The quotas check: EC2 vCPU quotas per class and market (moto's instances in use), HyperPod's per-type quotas.

Service Quotas answers through a Stubber (moto has no ec2 or sagemaker quotas); the BASE_SPEC plan needs
1 × m5.2xlarge (8 vCPUs, Standard) for its login nodes and 2 × p5.48xlarge (384 vCPUs, P) for group gpu.
"""

from __future__ import annotations

import dataclasses

import pytest

from kiln.catalog import UnknownInstanceType, instance_type
from kiln.preflight.checks import quotas
from kiln.preflight.run import run_check
from tests.support.preflight import client_error, make_plan, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

IMAGE = "ami-12345678"
STANDARD_OD, P_OD, P_SPOT = "L-1216C47A", "L-417A185B", "L-7212CCBC"
GPU_GROUP = {"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 4, "max_count": 4}
HYPERPOD = {"backend": "hyperpod", "groups": [GPU_GROUP]}
TOTAL_NAME = "Total number of instances allowed across SageMaker HyperPod clusters"


def quota(code: str, value: float, name: str = "", service: str = "ec2") -> dict:
    """Return one ServiceQuota as Service Quotas describes it."""
    return {"ServiceCode": service, "QuotaCode": code, "QuotaName": name or code, "Value": float(value)}


def expect_ec2_quota(stubber, code: str, value: float) -> None:
    stubber.add_response("get_service_quota", {"Quota": quota(code, value)}, {"ServiceCode": "ec2", "QuotaCode": code})


def launch(aws, instance: str, count: int = 1, *, spot: bool = False) -> None:
    market = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    aws.ec2.run_instances(ImageId=IMAGE, InstanceType=instance, MinCount=count, MaxCount=count, **market)


def by_subject(findings) -> dict:
    return {finding.subject: finding for finding in findings}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("p5.48xlarge", "P"),
        ("p6-b200.48xlarge", "P"),
        ("g6e.12xlarge", "G and VT"),
        ("gr6.4xlarge", "G and VT"),
        ("g5g.xlarge", "G and VT"),
        ("vt1.3xlarge", "G and VT"),
        ("trn2.48xlarge", "Trn"),
        ("trn1n.32xlarge", "Trn"),
        ("inf2.48xlarge", "Inf"),
        ("hpc7a.96xlarge", "HPC"),
        ("dl1.24xlarge", "DL"),
        ("dl2q.24xlarge", "DL"),
        ("i4i.32xlarge", "Standard (A, C, D, H, I, M, R, T, Z)"),
        ("d3.8xlarge", "Standard (A, C, D, H, I, M, R, T, Z)"),
        ("h1.16xlarge", "Standard (A, C, D, H, I, M, R, T, Z)"),
        ("t3.large", "Standard (A, C, D, H, I, M, R, T, Z)"),
        ("x2idn.32xlarge", "X"),
        ("f2.12xlarge", "F"),
        ("u-6tb1.112xlarge", "High Memory"),
        ("u7i-12tb.224xlarge", "High Memory"),
        ("m5.xlarge", "Standard (A, C, D, H, I, M, R, T, Z)"),
    ],
)
def test_each_family_counts_against_its_class(name: str, expected: str) -> None:
    assert quotas.quota_class(name).name == expected


def test_every_quota_code_belongs_to_one_class() -> None:
    codes = [c.on_demand for c in quotas.QUOTA_CLASSES] + [c.spot for c in quotas.QUOTA_CLASSES if c.spot]
    assert len(codes) == len(set(codes)) == 18
    assert [c.name for c in quotas.QUOTA_CLASSES if c.spot is None] == ["High Memory", "HPC"]


def test_enough_quota_is_ok_with_the_numbers(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    expect_ec2_quota(stubber, P_OD, 384)
    with stubber:
        findings = quotas.check(make_plan(), clients)
    stubber.assert_no_pending_responses()
    assert [f.line() for f in findings] == [
        "OK        quotas: EC2 On-Demand Standard (A, C, D, H, I, M, R, T, Z) vCPUs: "
        "needs 8 vCPUs (login nodes: 1 × m5.2xlarge), 0 in use, quota 64 (L-1216C47A)",
        "OK        quotas: EC2 On-Demand P vCPUs: needs 384 vCPUs (group gpu: 2 × p5.48xlarge), 0 in use, "
        "quota 384 (L-417A185B)",
    ]


def test_too_little_quota_fails_with_the_value_to_request(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    expect_ec2_quota(stubber, P_OD, 192)
    with stubber:
        findings = by_subject(quotas.check(make_plan(), clients))
    p = findings["EC2 On-Demand P vCPUs"]
    assert p.status == "fail"
    assert p.message == "needs 384 vCPUs (group gpu: 2 × p5.48xlarge), 0 in use, quota 192 (L-417A185B)"
    assert p.remedy == "request at least 384 for L-417A185B in Service Quotas (ec2, us-east-1)"


def test_instances_in_use_push_the_need_over_the_quota(aws) -> None:
    launch(aws, "p5.48xlarge")
    launch(aws, "p5.48xlarge", spot=True)  # counts against the Spot quota, not this one
    launch(aws, "m5.2xlarge", 2)
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    expect_ec2_quota(stubber, P_OD, 384)
    with stubber:
        findings = by_subject(quotas.check(make_plan(), clients))
    standard = findings["EC2 On-Demand Standard (A, C, D, H, I, M, R, T, Z) vCPUs"]
    assert (standard.status, standard.message.split(", ")[1]) == ("ok", "16 in use")
    p = findings["EC2 On-Demand P vCPUs"]
    assert p.status == "fail"
    assert p.message == "needs 384 vCPUs (group gpu: 2 × p5.48xlarge), 192 in use, quota 384 (L-417A185B)"
    assert p.remedy == "request at least 576 for L-417A185B in Service Quotas (ec2, us-east-1)"


def test_stopped_instances_use_no_quota(aws) -> None:
    launch(aws, "p5.48xlarge")
    (instance,) = aws.ec2.describe_instances()["Reservations"][0]["Instances"]
    aws.ec2.stop_instances(InstanceIds=[instance["InstanceId"]])
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    expect_ec2_quota(stubber, P_OD, 384)
    with stubber:
        findings = by_subject(quotas.check(make_plan(), clients))
    assert findings["EC2 On-Demand P vCPUs"].status == "ok"


def test_spot_nodes_and_spot_instances_count_against_the_spot_quota(aws) -> None:
    launch(aws, "p5.48xlarge", spot=True)
    launch(aws, "p5.48xlarge")  # On-Demand: not counted here
    plan = make_plan(
        compute={
            "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2, "capacity": {"type": "spot"}}]
        }
    )
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    expect_ec2_quota(stubber, P_SPOT, 384)
    with stubber:
        findings = by_subject(quotas.check(plan, clients))
    stubber.assert_no_pending_responses()
    spot = findings["EC2 Spot P vCPUs"]
    assert spot.status == "fail"
    assert spot.message == "needs 384 vCPUs (group gpu: 2 × p5.48xlarge), 192 in use, quota 384 (L-7212CCBC)"
    assert spot.remedy == "request at least 576 for L-7212CCBC in Service Quotas (ec2, us-east-1)"


def test_an_unapplied_quota_reads_the_aws_default(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    stubber.add_client_error("get_service_quota", **client_error("NoSuchResourceException"))
    stubber.add_response(
        "get_aws_default_service_quota", {"Quota": quota(P_OD, 0)}, {"ServiceCode": "ec2", "QuotaCode": P_OD}
    )
    with stubber:
        findings = by_subject(quotas.check(make_plan(), clients))
    stubber.assert_no_pending_responses()
    p = findings["EC2 On-Demand P vCPUs"]
    assert (p.status, p.message.rsplit(", ", 1)[1]) == ("fail", "quota 0 (L-417A185B)")


def test_types_the_catalog_lacks_are_asked_of_ec2(aws) -> None:
    with pytest.raises(UnknownInstanceType):
        instance_type("t2.micro")
    launch(aws, "t2.micro", 3)  # 1 vCPU each, from DescribeInstanceTypes
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 10)
    expect_ec2_quota(stubber, P_OD, 384)
    with stubber:
        findings = by_subject(quotas.check(make_plan(), clients))
    standard = findings["EC2 On-Demand Standard (A, C, D, H, I, M, R, T, Z) vCPUs"]
    assert standard.status == "fail"
    assert standard.message == "needs 8 vCPUs (login nodes: 1 × m5.2xlarge), 3 in use, quota 10 (L-1216C47A)"


def test_in_use_reads_each_instances_market(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    instances = [
        {"InstanceType": "p5.48xlarge"},
        {"InstanceType": "p5.48xlarge", "InstanceLifecycle": "spot"},
        {"InstanceType": "p5.48xlarge", "InstanceLifecycle": "capacity-block"},
        {"InstanceType": "m5.xlarge", "InstanceLifecycle": "scheduled"},
    ]
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    stubber.add_response("describe_instances", {"Reservations": [{"Instances": instances}]}, {"Filters": filters})
    with stubber:
        running = quotas._running(clients)
    assert running == [("p5.48xlarge", "On-Demand"), ("p5.48xlarge", "Spot"), ("m5.xlarge", "On-Demand")]


def test_capacity_blocks_are_left_to_the_reservations_check(aws) -> None:
    capacity = {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}
    plan = make_plan(
        compute={"groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2, "capacity": capacity}]}
    )
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)  # the login nodes; no P quota is read
    with stubber:
        findings = quotas.check(plan, clients)
    stubber.assert_no_pending_responses()
    assert [f.status for f in findings] == ["ok", "ok"]
    assert findings[-1].line() == (
        "OK        quotas: EC2 capacity blocks: group gpu: 2 × p5.48xlarge: capacity blocks count against no vCPU "
        "quota; the reservations check proves the blocks"
    )


def test_spot_in_a_class_without_a_spot_quota_warns(aws) -> None:
    group = {"name": "cpu", "instance_type": "hpc7a.96xlarge", "max_count": 2, "capacity": {"type": "spot"}}
    clients, stubber = stubbed(aws, "service_quotas")
    expect_ec2_quota(stubber, STANDARD_OD, 64)
    with stubber:
        findings = by_subject(quotas.check(make_plan(compute={"groups": [group]}), clients))
    hpc = findings["EC2 Spot HPC vCPUs"]
    assert hpc.status == "warn"
    assert "no Spot quota for HPC instances" in hpc.message
    assert hpc.remedy.startswith("buy group cpu On-Demand")


def test_a_plan_without_nodes_says_so(aws) -> None:
    plan = dataclasses.replace(make_plan(), nodes=())
    (finding,) = quotas.check(plan, aws)
    assert (finding.status, finding.message) == ("ok", "the cluster launches no node")


@pytest.mark.parametrize("code", ["AccessDeniedException", "ThrottlingException"])
def test_a_refused_quota_read_is_one_unchecked_line(aws, code: str) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("get_service_quota", **client_error(code))
    with stubber:
        (finding,) = run_check(quotas.CHECK, make_plan(), clients)
    assert finding.status == "unchecked"
    assert "servicequotas:GetServiceQuota" in finding.message
    if code == "AccessDeniedException":
        assert "allow servicequotas:GetServiceQuota" in finding.remedy and "--skip quotas" in finding.remedy
    else:
        assert finding.remedy == "run preflight again in a minute"


def test_a_refused_instance_listing_names_its_action(aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_instances", **client_error("UnauthorizedOperation", status=403))
    with stubber:
        (finding,) = run_check(quotas.CHECK, make_plan(), clients)
    assert finding.status == "unchecked"
    assert (
        finding.remedy == "allow ec2:DescribeInstances (read-only) for the identity running kiln, or pass --skip quotas"
    )


# ---- HyperPod: head m5.8xlarge, login m5.2xlarge and 4 × p5.48xlarge, all as ml. types ----


def sagemaker_quota(code: str, value: float, name: str) -> dict:
    return quota(code, value, name, service="sagemaker")


def expect_listing(stubber, operation: str, *pages: list[dict]) -> None:
    """Queue PAGES of a ListServiceQuotas-shaped OPERATION for sagemaker, linked by NextToken."""
    for number, page in enumerate(pages):
        params = {"ServiceCode": "sagemaker", "MaxResults": 100}
        if number:
            params["NextToken"] = f"page-{number}"
        answer = {"Quotas": page}
        if number < len(pages) - 1:
            answer["NextToken"] = f"page-{number + 1}"
        stubber.add_response(operation, answer, params)


ALL_TYPES = [
    sagemaker_quota("L-M58", 1, "ml.m5.8xlarge for cluster usage"),
    sagemaker_quota("L-M52", 2, "ml.m5.2xlarge for cluster usage"),
]


def test_hyperpod_types_within_their_quotas_are_ok_from_one_listing(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    first = [sagemaker_quota("L-TRAIN", 8, "ml.p5.48xlarge for training job usage"), *ALL_TYPES]
    second = [sagemaker_quota("L-P5", 4, "ML.P5.48XLARGE For Cluster Usage"), sagemaker_quota("L-TOT", 10, TOTAL_NAME)]
    expect_listing(stubber, "list_service_quotas", first, second)
    with stubber:
        findings = quotas.check(make_plan(compute=HYPERPOD), clients)
    stubber.assert_no_pending_responses()
    assert [(f.subject, f.status) for f in findings] == [
        ("HyperPod ml.m5.8xlarge", "ok"),
        ("HyperPod ml.m5.2xlarge", "ok"),
        ("HyperPod ml.p5.48xlarge", "ok"),
        (f"HyperPod: {TOTAL_NAME}", "ok"),
    ]
    assert findings[2].message.startswith("needs 4 instances (group gpu: 4 × ml.p5.48xlarge), quota 4 (L-P5); ")
    assert "existing clusters share it" in findings[2].message
    assert findings[3].message.startswith("needs 6 instances (head node: 1 × ml.m5.8xlarge, ")


def test_a_hyperpod_quota_below_the_need_fails(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    listed = [*ALL_TYPES, sagemaker_quota("L-P5", 2, "ml.p5.48xlarge for cluster usage")]
    expect_listing(stubber, "list_service_quotas", [*listed, sagemaker_quota("L-TOT", 5, TOTAL_NAME)])
    with stubber:
        findings = by_subject(quotas.check(make_plan(compute=HYPERPOD), clients))
    p5 = findings["HyperPod ml.p5.48xlarge"]
    assert p5.status == "fail"
    assert p5.message.startswith("needs 4 instances (group gpu: 4 × ml.p5.48xlarge), quota 2 (L-P5)")
    assert p5.remedy == "request at least 4 for L-P5 in Service Quotas (sagemaker, us-east-1)"
    total = findings[f"HyperPod: {TOTAL_NAME}"]
    assert (total.status, total.remedy) == (
        "fail",
        "request at least 6 for L-TOT in Service Quotas (sagemaker, us-east-1)",
    )


def test_a_type_missing_from_the_applied_list_is_read_from_the_defaults(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    expect_listing(stubber, "list_service_quotas", ALL_TYPES)
    defaults = [*ALL_TYPES, sagemaker_quota("L-P5", 0, "ml.p5.48xlarge for cluster usage")]
    expect_listing(stubber, "list_aws_default_service_quotas", defaults)
    with stubber:
        findings = by_subject(quotas.check(make_plan(compute=HYPERPOD), clients))
    stubber.assert_no_pending_responses()
    assert findings["HyperPod ml.p5.48xlarge"].status == "fail"
    assert "quota 0 (L-P5)" in findings["HyperPod ml.p5.48xlarge"].message
    assert f"HyperPod: {TOTAL_NAME}" not in findings  # optional: not listed, not checked


def test_a_type_hyperpod_has_no_quota_for_is_not_offered(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    other = [*ALL_TYPES, sagemaker_quota("L-P4", 4, "ml.p4d.24xlarge for cluster usage")]
    expect_listing(stubber, "list_service_quotas", other)
    expect_listing(stubber, "list_aws_default_service_quotas", other)
    with stubber:
        findings = by_subject(quotas.check(make_plan(compute=HYPERPOD), clients))
    p5 = findings["HyperPod ml.p5.48xlarge"]
    assert p5.status == "fail"
    assert p5.message == "HyperPod offers no ml.p5.48xlarge in us-east-1 (no cluster-usage quota)"


def test_no_cluster_usage_quota_at_all_is_unchecked(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    unrelated = [sagemaker_quota("L-TRAIN", 8, "ml.p5.48xlarge for training job usage")]
    expect_listing(stubber, "list_service_quotas", unrelated)
    expect_listing(stubber, "list_aws_default_service_quotas", [])
    with stubber:
        findings = quotas.check(make_plan(compute=HYPERPOD), clients)
    stubber.assert_no_pending_responses()
    assert [f.status for f in findings] == ["unchecked"] * 3
    assert "'ml.p5.48xlarge for cluster usage'" in findings[2].remedy
    assert "at least 4" in findings[2].remedy and "--skip quotas" in findings[2].remedy


def test_a_refused_sagemaker_listing_names_its_action(aws) -> None:
    clients, stubber = stubbed(aws, "service_quotas")
    stubber.add_client_error("list_service_quotas", **client_error("AccessDeniedException"))
    with stubber:
        (finding,) = run_check(quotas.CHECK, make_plan(compute=HYPERPOD), clients)
    assert finding.status == "unchecked"
    assert "allow servicequotas:ListServiceQuotas" in finding.remedy and "--skip quotas" in finding.remedy


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ml.p5.48xlarge for cluster usage", "ml.p5.48xlarge"),
        (" ML.P6-B200.48XLARGE for cluster usage ", "ml.p6-b200.48xlarge"),
        ("ml.p5.48xlarge for training job usage", None),
        ("ml.p5.48xlarge for spot training job usage", None),
        ("Maximum number of instances per cluster", None),
    ],
)
def test_cluster_usage_names(name: str, expected: str | None) -> None:
    assert quotas.cluster_usage_type(name) == expected


def test_the_total_instances_quota_is_told_apart() -> None:
    assert quotas.is_total_instances(TOTAL_NAME)
    assert not quotas.is_total_instances("Total number of instances across all training jobs")
    assert not quotas.is_total_instances("Maximum number of instances per SageMaker HyperPod cluster")
