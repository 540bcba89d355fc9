"""The plan: what a spec asks of an account, derived without AWS."""

from __future__ import annotations

import pytest

from kiln.catalog import instance_type
from kiln.catalog.interfaces import addresses_with_efa_everywhere, efa_layout, layout_addresses
from kiln.preflight.plan import plan_for
from kiln.spec import load_spec
from tests.support.paths import ROOT
from tests.support.preflight import make_plan

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _nodes(plan) -> list[tuple[str, str, int, int, bool]]:
    return [(n.role, n.instance_type, n.count, n.addresses, n.hyperpod) for n in plan.nodes]


def test_pcs_launches_login_nodes_and_groups_with_the_launch_template_layout() -> None:
    plan = make_plan()
    # p5 carries 32 EFA interfaces; 31 are EFA-only and take no address.
    assert _nodes(plan) == [("login nodes", "m5.2xlarge", 1, 1, False), ("group gpu", "p5.48xlarge", 2, 1, False)]
    assert plan.address_need == 3
    assert plan.services == ("ec2", "s3", "cloudformation", "pcs")


def test_parallelcluster_adds_a_head_node_and_counts_one_address_per_node() -> None:
    # ParallelCluster's EFA interfaces are EFA-only (tests/preflight/test_parallelcluster_addresses.py).
    plan = make_plan(compute={"backend": "parallelcluster"})
    assert _nodes(plan) == [
        ("head node", "m5.8xlarge", 1, 1, False),
        ("login nodes", "m5.2xlarge", 1, 1, False),
        ("group gpu", "p5.48xlarge", 2, 1, False),
    ]
    assert plan.address_need == 1 + 1 + 2 * 1


def test_hyperpod_nodes_are_bought_through_sagemaker_with_their_ec2_names() -> None:
    plan = make_plan(region="us-east-1", compute={"backend": "hyperpod"})
    assert all(node.hyperpod for node in plan.nodes)
    assert [n.role for n in plan.nodes] == ["head node", "login nodes", "group gpu"]
    assert plan.ec2_types == ()
    assert "sagemaker" in plan.services


def test_hyperpod_on_eks_runs_only_the_groups() -> None:
    plan = make_plan(compute={"backend": "hyperpod", "orchestrator": "eks", "login_nodes": None})
    assert [n.role for n in plan.nodes] == ["group gpu"]
    assert {"sagemaker", "eks"} <= set(plan.services)


def test_eks_adds_its_system_nodes() -> None:
    plan = make_plan(compute={"backend": "eks", "login_nodes": None})
    assert _nodes(plan)[0] == ("EKS system nodes", "m5.xlarge", 2, 1, False)


def test_a_group_counts_at_its_largest_and_carries_its_capacity() -> None:
    group = {
        "name": "gpu",
        "instance_type": "p5.48xlarge",
        "min_count": 3,
        "max_count": 3,
        "capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"},
    }
    plan = make_plan(compute={"groups": [group]})
    node = plan.nodes[-1]
    assert (node.count, node.capacity, node.reservation_id) == (3, "capacity-block", "cr-0123456789abcdef0")
    assert node.vcpus == 3 * instance_type("p5.48xlarge").vcpus


def test_no_login_nodes_means_none_in_the_plan() -> None:
    plan = make_plan(compute={"login_nodes": {"count": 0}})
    assert [n.role for n in plan.nodes] == ["group gpu"]


def test_new_vpc_private_subnet_is_two_bits_longer() -> None:
    assert make_plan(network={"vpc_cidr": "10.0.0.0/16"}).new_subnet_addresses == 2**14 - 5
    assert make_plan(network={"vpc_cidr": "10.0.0.0/22"}).new_subnet_addresses == 2**8 - 5


def test_an_existing_vpc_has_no_new_subnet() -> None:
    plan = make_plan(network={"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"})
    assert plan.new_subnet_addresses is None
    assert (plan.vpc_id, plan.subnet_id) == ("vpc-0123456789abcdef0", "subnet-0123456789abcdef0")


def test_ami_root_size_is_the_smallest_groups_except_on_hyperpod() -> None:
    groups = [
        {"name": "aaa", "instance_type": "p5.48xlarge", "min_count": 1, "root_volume_gib": 300},
        {"name": "bbb", "instance_type": "g5.12xlarge", "min_count": 1, "root_volume_gib": 120},
    ]
    image = {"ami_id": "ami-0123456789abcdef0"}
    assert make_plan(compute={"groups": groups, "image": image}).smallest_root_gib == 120
    assert make_plan(compute={"groups": groups}).smallest_root_gib is None
    hyperpod = make_plan(compute={"backend": "hyperpod", "groups": groups, "image": image})
    assert hyperpod.smallest_root_gib is None and all(n.boots_ami for n in hyperpod.nodes)


def test_lustre_bake_and_ttl_add_their_services() -> None:
    plan = make_plan(
        storage={"lustre": {"deployment": "SCRATCH_2", "storage_gib": 1200}},
        ci={"ttl_hours": 2},
    )
    assert {"fsx", "scheduler", "lambda"} <= set(plan.services)
    baked = make_plan(compute={"image": {"ami_id": "ami-0123456789abcdef0", "bake": True}})
    assert "imagebuilder" in baked.services


def test_data_repository_bucket_is_the_import_paths_first_part() -> None:
    lustre = {"data_repository": {"import_path": "s3://datasets-bucket/tokens/v2"}}
    assert make_plan(storage={"lustre": lustre}).import_bucket == "datasets-bucket"
    assert make_plan(storage={"lustre": {}}).import_bucket is None


def test_an_environment_plan_uses_the_environments_names() -> None:
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    plan = plan_for(spec, spec_path="q.yaml", region="us-east-1", environment="qs-4242", account="123456789012")
    assert (plan.name, plan.storage_stack, plan.bucket_name) == (
        "qs-4242",
        "qs-4242-storage",
        "qs-4242-data-123456789012",
    )
    with pytest.raises(ValueError, match="needs the account"):
        plan_for(spec, spec_path="q.yaml", region="us-east-1", environment="qs-4242")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_has_a_plan_with_nodes_and_its_backends_service(path) -> None:
    spec = load_spec(path)
    plan = plan_for(spec, spec_path=str(path), region=spec.region or "us-east-1")
    assert plan.nodes and plan.address_need >= sum(n.count for n in plan.nodes)
    assert {"pcs": "pcs", "parallelcluster": "lambda", "hyperpod": "sagemaker", "eks": "eks"}[plan.backend] in (
        plan.services
    )


def test_layout_addresses_skip_efa_only_interfaces() -> None:
    layout = efa_layout("p5.48xlarge")
    assert len(layout) == 32 and layout_addresses("p5.48xlarge") == 1
    assert layout_addresses("m5.xlarge") == 1
    # HyperPod, whose interfaces kiln does not choose, may give each EFA interface an address.
    assert addresses_with_efa_everywhere("p4d.24xlarge") == 4
    assert addresses_with_efa_everywhere("m5.xlarge") == 1
