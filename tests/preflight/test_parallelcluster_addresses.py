"""Preflight counts the private addresses a ParallelCluster node takes from what ParallelCluster attaches: with EFA on,
an ENA interface and EFA-only interfaces, so one address per compute node, not one per EFA interface. The fact is
held to ParallelCluster's own code: the installed 3.16.1 package's add_network_interfaces, run on each type."""

from __future__ import annotations

import ast
import inspect
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pcluster
import pytest
from pcluster.constants import P6E_GB200

from kiln.catalog import instance_type
from kiln.catalog.interfaces import EFA_ONLY, parallelcluster_addresses
from kiln.catalog.platforms import service_fact
from kiln.preflight.checks import subnet
from tests.support.preflight import make_plan

QUEUES_STACK = Path(inspect.getfile(pcluster)).parent / "templates" / "queues_stack.py"
TYPES = ("p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "p6-b300.48xlarge", "trn1.32xlarge", "g5.12xlarge")


def _parallelclusters_interfaces():
    """ParallelCluster's add_network_interfaces, from the installed package's source, building plain dicts where it
    builds CDK v1 properties (the package imports CDK v1, which kiln does not install)."""
    tree = ast.parse(QUEUES_STACK.read_text())
    [function] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "add_network_interfaces"]
    scope = {
        "ec2": SimpleNamespace(CfnLaunchTemplate=SimpleNamespace(NetworkInterfaceProperty=dict)),
        "P6E_GB200": P6E_GB200,
        "SlurmComputeResource": type("SlurmComputeResource", (), {}),
    }
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(QUEUES_STACK), "exec"), scope)  # noqa: S102
    return scope["add_network_interfaces"]


def _attached(name: str) -> list[dict]:
    """The interfaces ParallelCluster's launch template gives a compute node of NAME, EFA on where it is supported
    (as kiln's queues set it), from the catalog's EC2 facts."""
    facts = instance_type(name)
    per_card = max(1, facts.max_network_interfaces // facts.network_cards)
    cards = [
        SimpleNamespace(network_card_index=lambda i=i: i, maximum_network_interfaces=lambda: per_card)
        for i in range(facts.network_cards)
    ]
    resource = SimpleNamespace(
        instance_types=[name],
        efa=SimpleNamespace(enabled=facts.efa_supported),
        network_cards_list=cards,
        max_efa_interfaces=facts.max_efa_interfaces,
        max_network_cards=facts.network_cards,
    )
    queue = SimpleNamespace(networking=SimpleNamespace(assign_public_ip=False, subnet_ids=["subnet-0"]))
    return _parallelclusters_interfaces()(queue, resource, ["sg-0"])


def test_the_fact_is_read_from_parallelcluster_3_16_1() -> None:
    fact = service_fact("parallelcluster", "node_addresses")
    assert fact.source.endswith("/v3.16.1/cli/src/pcluster/templates/queues_stack.py")
    assert version("aws-parallelcluster") == "3.16.1"  # the package these tests read
    assert fact.value["compute_with_efa"] == 1


@pytest.mark.parametrize("name", TYPES)
def test_kilns_count_is_what_parallelclusters_template_attaches(name: str) -> None:
    interfaces = _attached(name)
    with_address = [i for i in interfaces if i.get("interface_type") != EFA_ONLY]
    assert parallelcluster_addresses(name, "compute") == len(with_address)


def test_a_p5_compute_node_takes_one_address_and_32_efa_devices() -> None:
    interfaces = _attached("p5.48xlarge")
    assert len(interfaces) == 33 and parallelcluster_addresses("p5.48xlarge", "compute") == 1
    assert [i["interface_type"] for i in interfaces].count(EFA_ONLY) == 32


def test_preflight_on_a_p5_parallelcluster_spec_counts_one_address_per_node() -> None:
    plan = make_plan(compute={"backend": "parallelcluster"})
    assert subnet.address_breakdown(plan) == (
        "1 × m5.8xlarge × 1 + 1 × m5.2xlarge × 1 + 2 × p5.48xlarge × 1 = 4 addresses"
    )


def test_the_head_node_takes_one_per_network_card_and_a_login_node_one() -> None:
    assert parallelcluster_addresses("m5.8xlarge", "head_node") == 1
    assert parallelcluster_addresses("p5.48xlarge", "head_node") == 32
    assert parallelcluster_addresses("p5.48xlarge", "login_node") == 1
    with pytest.raises(ValueError, match="ParallelCluster has no 'worker' nodes"):
        parallelcluster_addresses("p5.48xlarge", "worker")
