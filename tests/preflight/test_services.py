"""The services check: SSM's global-infrastructure parameters say which services a region offers."""

from __future__ import annotations

from kiln.preflight.checks import services
from kiln.preflight.run import run_check
from tests.support.preflight import client_error, make_plan, stubbed


def test_every_service_offered_is_one_ok_line(aws) -> None:
    (finding,) = services.check(make_plan(storage={"lustre": {}}), aws)
    assert finding.status == "ok"
    assert finding.line() == "OK        services: us-east-1: offers ec2, s3, cloudformation, pcs, fsx"


def test_a_region_without_pcs_fails_naming_it_and_where_to_look(aws) -> None:
    # moto's copy of the public parameters: ap-east-1 offers no AWS PCS.
    plan = make_plan(region="ap-east-1")
    (finding,) = services.check(plan, aws)
    assert finding.status == "fail"
    assert finding.subject == "AWS Parallel Computing Service"
    assert finding.message == "not offered in ap-east-1"
    assert "/aws/service/global-infrastructure/services/pcs/regions" in finding.remedy


def test_access_denied_and_throttling_are_one_unchecked_line(aws) -> None:
    plan = make_plan()
    for code, words in (
        (
            "AccessDeniedException",
            "allow ssm:GetParameters (read-only) for the identity running kiln, or pass --skip services",
        ),
        ("ThrottlingException", "run preflight again in a minute"),
    ):
        clients, stubber = stubbed(aws, "ssm")
        stubber.add_client_error("get_parameters", **client_error(code))
        with stubber:
            (finding,) = run_check(services.CHECK, plan, clients)
        assert finding.status == "unchecked" and finding.check == "services"
        assert finding.remedy == words
        assert code in finding.message
