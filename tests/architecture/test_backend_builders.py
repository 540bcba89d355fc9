"""One interface per backend (kiln.stacks.backends): every platform of the backend table has its builder, one module
each, and the compute stack names no platform and no backend construct, so adding a backend is its record and its
module."""

from __future__ import annotations

import ast
import importlib
import inspect

from kiln.contracts import backends as table
from kiln.contracts.backends import PLATFORMS
from kiln.stacks.backends import BUILDERS, builder_for
from tests.support.paths import ROOT

BACKENDS_PACKAGE = ROOT / "kiln" / "stacks" / "backends"
# The modules of the package that build no backend: the registry and the interface.
SHARED = {"__init__", "base"}
# What only a builder may name: the platform records and the backend constructs.
PLATFORM_NAMES = {name for name, value in vars(table).items() if isinstance(value, table.Platform)}
BACKEND_CONSTRUCTS = {"PcsCluster", "ParallelCluster", "HyperPodCluster", "EksTrainingCluster"}


def _names(path) -> set[str]:
    """Every name PATH uses, imports or sets as an attribute of self."""
    tree = ast.parse(path.read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    names |= {
        f"self.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    return names


def test_every_platform_of_the_table_has_exactly_one_builder() -> None:
    assert set(BUILDERS) == set(PLATFORMS) and len(PLATFORM_NAMES) == len(PLATFORMS)
    assert all(builder_for(platform) is BUILDERS[platform] for platform in PLATFORMS)


def test_each_builder_is_the_build_of_a_module_of_its_own() -> None:
    modules = {path.stem for path in BACKENDS_PACKAGE.glob("*.py")} - SHARED
    builders = {importlib.import_module(f"kiln.stacks.backends.{stem}").build for stem in modules}
    # Every module builds, and every builder is a module's build (HyperPod's serves both its orchestrators).
    assert builders == set(BUILDERS.values())
    assert {inspect.getmodule(builder).__name__.rsplit(".", 1)[1] for builder in BUILDERS.values()} == modules
    # Each module's builder takes the one signature the protocol names.
    assert {tuple(inspect.signature(builder).parameters) for builder in builders} == {("stack", "context", "nodes")}


def test_the_compute_stack_names_no_platform_and_no_backend_construct() -> None:
    names = _names(ROOT / "kiln" / "stacks" / "compute.py")
    assert not names & PLATFORM_NAMES
    assert not names & BACKEND_CONSTRUCTS
    # No optional attribute per backend: the builder's result is the one way to what it made.
    assert not names & {"self.pcs", "self.parallelcluster", "self.hyperpod", "self.eks"}
    assert {"builder_for", "self.backend"} <= names
