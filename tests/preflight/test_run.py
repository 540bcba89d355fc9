"""The runner and the report: checks at once, refusals as one line, the verdict and its exit code."""

from __future__ import annotations

import json
import threading

import pytest
from botocore.exceptions import EndpointConnectionError, NoCredentialsError

from kiln.aws.errors import NoCredentials as NoCredentialsFound
from kiln.contracts.errors import InputError
from kiln.preflight import run
from kiln.preflight.findings import Finding, Report
from kiln.preflight.run import Check, preflight, run_preflight
from kiln.spec.load import parse_spec
from tests.support.fake_aws import REGION
from tests.support.preflight import BASE_SPEC, client_error, make_plan, stubbed


def _finding(check: str, status: str, subject: str = "it") -> Finding:
    return Finding(check=check, status=status, subject=subject, message="seen", remedy="" if status == "ok" else "do")


def _checks(monkeypatch: pytest.MonkeyPatch, *checks: Check) -> None:
    monkeypatch.setattr(run, "all_checks", lambda: checks)


def test_checks_run_at_the_same_time(monkeypatch: pytest.MonkeyPatch, aws) -> None:
    # Each check waits for all the others: only concurrent checks get past the barrier.
    barrier = threading.Barrier(4, timeout=10)

    def waiting(name: str) -> Check:
        def check(plan, clients) -> list[Finding]:
            barrier.wait()
            return [_finding(name, "ok")]

        return Check(name=name, about=name, run=check)

    _checks(monkeypatch, *(waiting(name) for name in "abcd"))
    report = run_preflight(make_plan(), aws)
    assert sorted(f.check for f in report.findings) == ["a", "b", "c", "d"] and report.ready


def test_a_refused_call_is_one_unchecked_line_and_the_other_checks_still_report(monkeypatch, aws) -> None:
    clients, stubber = stubbed(aws, "ec2")
    stubber.add_client_error("describe_subnets", **client_error("UnauthorizedOperation", status=403))

    def refused(plan, aws_clients) -> list[Finding]:
        aws_clients.ec2.describe_subnets()
        return []

    _checks(
        monkeypatch,
        Check(name="subnet", about="the subnet", run=refused),
        Check(name="fine", about="fine", run=lambda plan, c: [_finding("fine", "ok")]),
    )
    with stubber:
        report = run_preflight(make_plan(), clients)
    (line,) = [f.line() for f in report.ordered() if f.status == "unchecked"]
    assert line == (
        "UNCHECKED subnet: the subnet: ec2:DescribeSubnets was denied (UnauthorizedOperation); "
        "allow ec2:DescribeSubnets (read-only) for the identity running kiln, or pass --skip subnet"
    )
    assert not report.ready and report.exit_code == 1
    assert {f.check for f in report.findings} == {"subnet", "fine"}


def test_an_unreachable_endpoint_is_one_unchecked_line(monkeypatch, aws) -> None:
    def unreachable(plan, clients) -> list[Finding]:
        raise EndpointConnectionError(endpoint_url="https://pcs.ap-east-1.amazonaws.com/")

    _checks(monkeypatch, Check(name="services", about="services in the region", run=unreachable))
    (finding,) = run_preflight(make_plan(), aws).findings
    assert finding.status == "unchecked"
    assert 'Could not connect to the endpoint URL: "https://pcs.ap-east-1.amazonaws.com/"' in finding.message
    assert finding.remedy == "check the network and the region, or pass --skip services"


def test_skipped_checks_are_named_and_do_not_block(monkeypatch, aws) -> None:
    called: list[str] = []

    def check(name: str) -> Check:
        return Check(
            name=name, about=f"about {name}", run=lambda plan, c: called.append(name) or [_finding(name, "ok")]
        )

    _checks(monkeypatch, check("one"), check("two"))
    report = run_preflight(make_plan(), aws, skip=["two"])
    assert called == ["one"] and report.ready
    assert [f.line() for f in report.ordered()][
        0
    ] == "WARN      two: about two: skipped (--skip); run without --skip to prove it"


def test_the_verdict_and_order(monkeypatch) -> None:
    findings = (_finding("b", "ok"), _finding("a", "warn"), _finding("c", "fail"), _finding("a", "unchecked"))
    report = Report(spec="s.yaml", region=REGION, findings=findings, seconds=1.234)
    assert [f.status for f in report.ordered()] == ["fail", "unchecked", "warn", "ok"]
    assert (
        report.summary()
        == "kiln preflight: s.yaml in us-east-1: NOT ready (1 fail, 1 unchecked, 1 warn, 1 ok) in 1.2 s"
    )
    warned = Report(spec="s.yaml", region=REGION, findings=(_finding("a", "warn"),), seconds=0.5)
    assert warned.ready and warned.exit_code == 0
    document = json.loads(json.dumps(report.as_json()))
    assert document["ready"] is False and document["counts"] == {"fail": 1, "unchecked": 1, "warn": 1, "ok": 1}
    assert document["findings"][0] == {
        "check": "c",
        "status": "fail",
        "subject": "it",
        "message": "seen",
        "remedy": "do",
    }


def test_a_finding_that_is_not_ok_must_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="says what to do"):
        Finding(check="x", status="fail", subject="s", message="m")
    with pytest.raises(ValueError, match="status"):
        Finding(check="x", status="bad", subject="s", message="m")


def test_preflight_refuses_unknown_skips_and_reports_missing_credentials(monkeypatch, aws_env) -> None:
    import boto3

    spec = parse_spec(dict(BASE_SPEC), source="spec.yaml")
    with pytest.raises(InputError, match="--skip nope: no such check; the checks are services, offerings"):
        preflight(spec, spec_path="spec.yaml", session=boto3.Session(region_name=REGION), region=REGION, skip=["nope"])

    class NoCredentials:
        def client(self, *args, **kwargs):
            return self

        def get_caller_identity(self):
            raise NoCredentialsError()

    with pytest.raises(NoCredentialsFound, match="^no AWS credentials: "):
        preflight(spec, spec_path="spec.yaml", session=NoCredentials(), region=REGION)


def test_a_check_that_stops_unexpectedly_is_one_unchecked_line(monkeypatch, aws) -> None:
    def surprised(plan, clients) -> list[Finding]:
        raise KeyError("Quota")

    _checks(monkeypatch, Check(name="quotas", about="instance quotas", run=surprised))
    (finding,) = run_preflight(make_plan(), aws).findings
    assert finding.line() == (
        "UNCHECKED quotas: instance quotas: the check stopped: KeyError: 'Quota'; "
        "report it to kiln with this line, or pass --skip quotas"
    )
