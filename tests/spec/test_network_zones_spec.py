"""network.second_availability_zone and network.interface_endpoints: what the spec takes, and one line for what not."""

from __future__ import annotations

import copy

import pytest

from kiln.spec import SpecError
from kiln.spec.load import parse_spec
from tests.support.specs import MINIMAL_SPEC

EXISTING = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}


def spec_with(network: dict, **fields: object) -> dict:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["network"] = network
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_a_second_az_and_interface_endpoints_are_taken() -> None:
    spec = parse_spec(spec_with({"second_availability_zone": "us-east-1d", "interface_endpoints": True}))
    assert spec.network.second_availability_zone == "us-east-1d"
    assert spec.network.interface_endpoints is True
    plain = parse_spec(copy.deepcopy(MINIMAL_SPEC))
    assert (plain.network.second_availability_zone, plain.network.interface_endpoints) == (None, False)


@pytest.mark.parametrize(
    ("network", "fields", "line"),
    [
        (
            {"second_availability_zone": "us-east-1a"},
            {},
            "x.yaml: network.second_availability_zone: must differ from availability_zone (both are 'us-east-1a')",
        ),
        (
            {"second_availability_zone": "us-west-2b"},
            {},
            "x.yaml: network.second_availability_zone: must lie in availability_zone's region us-east-1 "
            "(got 'us-west-2b')",
        ),
        (
            {"second_availability_zone": "us-east-1b"},
            {"availability_zone": None},
            "x.yaml: network.second_availability_zone: needs availability_zone, the AZ of compute, FSx and EFA (got "
            "'us-east-1b' alone); without either, the VPC takes the region's first two AZs",
        ),
        (
            {**EXISTING, "second_availability_zone": "us-east-1b"},
            {},
            "x.yaml: network.second_availability_zone: applies to the VPC kiln creates; existing vpc_id "
            "vpc-0123456789abcdef0 keeps its own subnets (`kiln preflight` checks what its nodes need): remove it",
        ),
        (
            {**EXISTING, "interface_endpoints": True},
            {},
            "x.yaml: network.interface_endpoints: applies to the VPC kiln creates; existing vpc_id "
            "vpc-0123456789abcdef0 keeps its own endpoints (`kiln preflight` checks what its nodes need): remove it",
        ),
        (
            {"second_availability_zone": "us-east-1bb"},
            {},
            "x.yaml: network.second_availability_zone: must be an availability zone name such as us-east-1a "
            "(got 'us-east-1bb')",
        ),
        (
            {"interface_endpoints": "yes"},
            {},
            "x.yaml: network.interface_endpoints: must be true or false (got 'yes')",
        ),
    ],
)
def test_a_bad_second_az_or_endpoints_is_one_line(network: dict, fields: dict, line: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_with(network, **fields), "x.yaml")
    assert caught.value.lines_out() == [line]


def test_an_existing_vpc_may_say_no_endpoints() -> None:
    spec = parse_spec(spec_with({**EXISTING, "interface_endpoints": False}))
    assert spec.network.interface_endpoints is False
