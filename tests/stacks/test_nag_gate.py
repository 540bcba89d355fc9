"""cdk-nag is a real gate: a finding stops synthesis unless acknowledged with a reason."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from cdk_nag import AwsSolutionsChecks

from kiln.constructs.acknowledgements import Finding
from kiln.constructs.review import acknowledge
from kiln.stacks.app import new_app
from kiln.stacks.synth import nag_report


def _app_with_open_ssh(tmp_path, acknowledged: bool) -> cdk.App:
    app = new_app(str(tmp_path))
    stack = cdk.Stack(app, "Gate")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"])
    group = ec2.SecurityGroup(stack, "Open", vpc=vpc)
    group.add_ingress_rule(ec2.Peer.ipv4("10.0.0.0/8"), ec2.Port.tcp(22))
    group.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443))
    if acknowledged:
        acknowledge(group, Finding("AwsSolutions-EC23", "Public HTTPS endpoint by design in this test."))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def test_unacknowledged_finding_stops_synthesis(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        _app_with_open_ssh(tmp_path, acknowledged=False).synth()
    assert [v.split(" at ")[0] for v in nag_report(tmp_path).violations] == ["AwsSolutions-EC23"]


def test_acknowledged_finding_is_reported_with_its_reason(tmp_path) -> None:
    _app_with_open_ssh(tmp_path, acknowledged=True).synth()
    report = nag_report(tmp_path)
    assert report.violations == []
    assert report.acknowledged == [("AwsSolutions::AwsSolutions-EC23", "Public HTTPS endpoint by design in this test.")]


def test_an_acknowledgement_needs_a_reason() -> None:
    app = new_app()
    stack = cdk.Stack(app, "NoReason")
    with pytest.raises(ValueError, match="reason"):
        acknowledge(stack, Finding("AwsSolutions-IAM5", "  "))
