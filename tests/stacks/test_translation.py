"""spec -> props: each backend's translation module, on the shipped examples' stacks."""

from __future__ import annotations

import pytest
import yaml
from aws_cdk import Stack

from kiln.spec import load_spec, parse_spec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.backends.hyperpod import hyperpod_groups, provisioning_parameters
from kiln.stacks.backends.pcs import pcs_size
from kiln.stacks.compute_context import ComputeContext
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def hyperpod_slurm():
    spec = load_spec(ROOT / "examples" / "p5-hyperpod-slurm.yaml")
    stacks = build_cluster(new_app(), spec, nag=False)
    return spec, stacks


def test_provisioning_parameters_follow_the_spec_groups(hyperpod_slurm) -> None:
    spec, stacks = hyperpod_slurm
    context = ComputeContext(spec=spec, network=stacks.network, storage=stacks.storage)
    parameters = Stack.of(stacks.compute).resolve(provisioning_parameters(context, hyperpod_groups(spec)))
    assert parameters["controller_group"] == "controller" and parameters["login_group"] == "login"
    assert parameters["worker_groups"] == [{"instance_group_name": "p5", "partition_name": "p5"}]
    assert set(parameters) >= {"fsx_dns_name", "fsx_mountname"}


def test_hyperpod_groups_put_controller_and_login_first(hyperpod_slurm) -> None:
    spec, _ = hyperpod_slurm
    groups = hyperpod_groups(spec)
    assert [(g.name, g.role) for g in groups] == [("controller", "controller"), ("login", "login"), ("p5", "worker")]
    assert groups[-1].count == spec.compute.groups[0].max_count


def test_hyperpod_lifecycle_is_the_one_rendered_bundle(hyperpod_slurm) -> None:
    _, stacks = hyperpod_slurm
    compute = stacks.compute
    assert compute.backend.construct.lifecycle_bundle is compute.bootstrap.node_bootstrap
    assert compute.bootstrap.node_bootstrap.entry_point == "on_create.sh"


@pytest.mark.parametrize(("max_count", "size"), [(31, "SMALL"), (32, "MEDIUM"), (511, "MEDIUM"), (512, "LARGE")])
def test_pcs_controller_size_follows_the_node_count(max_count: int, size: str) -> None:
    # quickstart: one group and one login node.
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["compute"]["groups"][0]["max_count"] = max_count
    assert pcs_size(parse_spec(data)) == size
