"""A network stack built alone, in an app that has looked the account's zones up (or not), and the lookups it leaves."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import aws_cdk as cdk

from kiln.spec.load import parse_spec
from kiln.stacks.app import new_app
from kiln.stacks.network import NetworkStack
from tests.support.specs import MINIMAL_SPEC

ACCOUNT = "123456789012"


LOOKUP = f"availability-zones:account={ACCOUNT}:region=us-east-1"


ACCOUNT_ENV = cdk.Environment(account=ACCOUNT, region="us-east-1")


AGNOSTIC_ACCOUNT = cdk.Environment(region="us-east-1")


EKS = {"backend": "eks", "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}]}


HYPERPOD_EKS = {
    "backend": "hyperpod",
    "orchestrator": "eks",
    "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}],
}


def spec_of(compute: dict | None = None, **fields: object):
    data = copy.deepcopy(MINIMAL_SPEC)
    if compute is not None:
        data["compute"] = copy.deepcopy(compute)
    data.update(fields)
    return parse_spec(data, "spec.yaml")


def network(spec, *, env: cdk.Environment = AGNOSTIC_ACCOUNT, zones: list[str] | None = None) -> NetworkStack:
    """Build SPEC's network stack alone, in a fresh app that has looked the account's AZs up as ZONES (if given)."""
    app = new_app()
    if zones is not None:
        app.node.set_context(LOOKUP, zones)
    return NetworkStack(app, f"{spec.name}-network", spec=spec, env=env)


def missing_context(stack: NetworkStack) -> list[str]:
    """Return the keys of the context lookups STACK's app left for the CDK CLI to run."""
    manifest = Path(cdk.App.of(stack).synth().directory) / "manifest.json"
    return [entry["key"] for entry in json.loads(manifest.read_text()).get("missing", [])]


def subnet_zones(stack: NetworkStack) -> list[str]:
    """Return the AZ of each private subnet, the compute subnet first."""
    return [subnet.availability_zone for subnet in stack.training_vpc.vpc.private_subnets]
