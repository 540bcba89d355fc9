"""What outlives a stack, and what kiln makes only when something uses it."""

from __future__ import annotations

import pytest
import yaml
from aws_cdk.assertions import Template

from kiln.spec import parse_spec
from kiln.stacks import build_cluster, new_app
from tests.conftest import ROOT


def _stacks(example: str, **changes):
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return build_cluster(new_app(), parse_spec(data), nag=False)


@pytest.mark.parametrize(("deployment", "policy"), [("SCRATCH_2", "Delete"), ("PERSISTENT_2", "Retain")])
def test_only_a_persistent_file_system_outlives_the_stack(deployment: str, policy: str) -> None:
    stacks = _stacks("quickstart.yaml", storage__lustre__deployment=deployment)
    (fs,) = Template.from_stack(stacks.storage).find_resources("AWS::FSx::FileSystem").values()
    assert fs["DeletionPolicy"] == policy


@pytest.mark.parametrize(
    ("example", "placement_groups"),
    [
        ("quickstart.yaml", 1),  # PCS, on-demand EFA group
        ("p5-pcs.yaml", 0),  # a capacity block places the nodes itself
        ("p5-eks.yaml", 1),
        ("p5-parallelcluster.yaml", 0),  # ParallelCluster makes its own
        ("p5-hyperpod-slurm.yaml", 0),
    ],
)
def test_placement_groups_exist_only_where_node_groups_use_them(example: str, placement_groups: int) -> None:
    stacks = _stacks(example)
    Template.from_stack(stacks.network).resource_count_is("AWS::EC2::PlacementGroup", placement_groups)
