"""code-server on the Slurm examples (PCS, ParallelCluster, HyperPod with Slurm): it listens on the node's loopback
only, so no security group rule of any example opens its port, and adding it to a running cluster is an update of the
nodes' bootstrap that adds no rule either (`kiln connect --vscode` reaches it over Session Manager).

The EKS examples' pod: tests/stacks/test_code_server_eks.py, whose rule walk this module shares.
"""

from __future__ import annotations

import json

import pytest

from kiln.catalog.code_server import CODE_SERVER_PORT
from kiln.spec import load_spec
from tests.support.code_server import _ingress_rules, _opens
from tests.support.day_two import assert_updates, example, templates
from tests.support.paths import EXAMPLES
from tests.support.specs import changed

SLURM_EXAMPLES = [
    path.stem
    for path in EXAMPLES
    if (spec := load_spec(path)).compute.backend != "eks" and spec.effective_orchestrator != "eks"
]


def _rules(stack_templates: dict[str, dict]) -> list[str]:
    """Return every ingress rule of STACK_TEMPLATES, each as the JSON of (stack, resource, rule), sorted."""
    return sorted(
        json.dumps([stack, name, rule], sort_keys=True)
        for stack, template in stack_templates.items()
        for name, rule, _ in _ingress_rules(template)
    )


def test_the_slurm_examples_include_one_with_code_server() -> None:
    assert "workshop-g6-pcs" in SLURM_EXAMPLES and example("workshop-g6-pcs")["code_server"] == {}
    assert {load_spec(path).compute.backend for path in EXAMPLES if path.stem in SLURM_EXAMPLES} == {
        "pcs",
        "parallelcluster",
        "hyperpod",
    }


@pytest.mark.parametrize("stem", SLURM_EXAMPLES)
def test_no_security_group_rule_of_a_slurm_example_opens_code_servers_port(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    assert assembly.returncode == 0, assembly.stderr
    checked = 0
    for stack, template in assembly.templates().items():
        for name, rule, group in _ingress_rules(template):
            checked += 1
            assert not _opens(rule, group, CODE_SERVER_PORT), f"{stack}: {name} opens {CODE_SERVER_PORT}: {rule}"
    # The examples do have rules (Lustre's, EFA's own): the walk found them.
    assert checked >= 3


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["p5-pcs", "p5-parallelcluster", "p5-hyperpod-slurm"])
def test_adding_code_server_later_is_an_update_that_adds_no_ingress_rule(stem: str) -> None:
    before = example(stem)
    after = changed(before, code_server={})
    assert_updates(before, after)
    old, new = templates(before), templates(after)
    assert _rules(old) == _rules(new)
    # The nodes do get it: their bootstrap bundle (an asset named by its digest) changed.
    assert old != new
