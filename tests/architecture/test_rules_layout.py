"""The layout of kiln.spec.rules: one small module per section of the spec, check's rules in their one order, each
rule defined once (docs/design.md, "The spec")."""

from __future__ import annotations

import ast

from kiln.spec import rules
from tests.support.paths import ROOT

PACKAGE = ROOT / "kiln" / "spec" / "rules"
# A section's module stays short enough to read whole; a section that outgrows it splits by its own sub-sections.
MAX_MODULE_LINES = 300
# The order `kiln validate` reports problems in: users and tests read the lines in this order.
ORDER = (
    "cluster_name",
    "placement",
    "network",
    "network_zones",
    "lustre",
    "bucket",
    "compute",
    "service_nodes",
    "architecture",
    "hyperpod_nodes",
    "kubernetes",
    "image",
    "software",
    "launcher",
    "resilience",
    "resilience_kubernetes",
    "ci",
    "observability",
    "tags",
    "image_ownership",
    "slurm",
    "pcs_image",
    "image_os",
    "bootstrap_steps",
    "code_server_pod",
    "code_server_node",
    "session_logs",
    "parallelcluster_boundary",
)


def _top_level_functions() -> dict[str, list[str]]:
    """Return each function name defined at the top of a module of the package, with the modules defining it."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append(path.stem)
    return found


def test_check_runs_the_rules_in_their_one_order() -> None:
    assert tuple(rule.__name__ for rule in rules.RULES) == ORDER


def test_the_rules_are_a_package_of_small_modules() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    lengths = {path.name: len(path.read_text().splitlines()) for path in modules}
    assert PACKAGE.is_dir() and len(modules) > 2
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_each_rule_lives_in_exactly_one_section_module() -> None:
    defined = _top_level_functions()
    homes = {rule.__name__: rule.__module__ for rule in rules.RULES}
    assert {name: defined.get(name) for name in ORDER if len(defined.get(name, [])) != 1} == {}
    assert {name: home for name, home in homes.items() if home != f"kiln.spec.rules.{defined[name][0]}"} == {}
    # No rule lives beside check or among the shared helpers: a rule belongs to its section.
    assert {home.rsplit(".", 1)[1] for home in homes.values()}.isdisjoint({"rules", "common"})


def test_no_function_is_defined_twice_across_the_sections() -> None:
    # The sections share helpers through kiln.spec.rules.common, never by copying them.
    twice = {name: modules for name, modules in _top_level_functions().items() if len(modules) > 1}
    assert twice == {}
