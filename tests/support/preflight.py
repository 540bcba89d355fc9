"""Builders for the preflight tests: plans from spec data, stubbed clients, client errors."""

from __future__ import annotations

import dataclasses
from typing import Any

import boto3
import yaml
from botocore.stub import Stubber

from kiln.aws.session import CLIENT_CONFIG
from kiln.preflight.aws import AwsClients
from kiln.preflight.plan import Plan, plan_for
from kiln.spec.load import parse_spec
from tests.support.fake_aws import REGION

AZ = f"{REGION}a"


# The smallest spec that names every field preflight reads; tests change it with `spec_text(**overrides)`.
BASE_SPEC = {
    "name": "pf",
    "region": REGION,
    "availability_zone": AZ,
    "compute": {
        "backend": "pcs",
        "login_nodes": {"instance_type": "m5.2xlarge", "count": 1},
        "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}],
    },
}


def merged(base: dict, overrides: dict) -> dict:
    """Return BASE with OVERRIDES merged in, dict by dict (a None value removes the key)."""
    out = dict(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def make_plan(region: str = REGION, **overrides: Any) -> Plan:
    """Return the plan of BASE_SPEC in REGION (its zone a) with OVERRIDES merged in."""
    data = merged(BASE_SPEC, {"region": region, "availability_zone": f"{region}a", **overrides})
    spec = parse_spec(yaml.safe_load(yaml.safe_dump(data)), source="spec.yaml")
    return plan_for(spec, spec_path="spec.yaml", region=region)


def stubbed(aws: AwsClients, service: str) -> tuple[AwsClients, Stubber]:
    """Return AWS with SERVICE's client (a field of AwsClients: ec2, service_quotas, s3, ...) replaced by a stubbed one.

    The caller adds responses and activates the stubber (`with stubber:`); moto still answers the other clients.
    """
    name = {"service_quotas": "service-quotas", "tagging": "resourcegroupstaggingapi"}.get(service, service)
    client = boto3.client(name, region_name=aws.region, config=CLIENT_CONFIG)
    return dataclasses.replace(aws, **{service: client}), Stubber(client)


def client_error(code: str, message: str = "refused", status: int = 400) -> dict[str, Any]:
    """Return Stubber.add_client_error keyword arguments for CODE."""
    return {"service_error_code": code, "service_message": message, "http_status_code": status}
