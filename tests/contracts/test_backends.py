"""The backend table (kiln/contracts/backends.py): it covers exactly the platforms the spec can name, its records agree
with themselves, and the modules that used to test backend names against strings ask the table instead."""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from pathlib import Path

import pytest

from kiln.bootstrap.config import TARGETS
from kiln.catalog.names import NODE_GROUP_NAME
from kiln.contracts.backends import (
    BACKENDS,
    ORCHESTRATED_BACKENDS,
    PLATFORMS,
    ROLES,
    Platform,
    platform_of,
)
from kiln.spec.models import ClusterSpec, Compute
from tests.support.paths import ROOT


def literal_values(annotation: object) -> tuple[object, ...]:
    """Return the values of the Literal types in ANNOTATION (a Literal, or a union holding one and None)."""
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    return tuple(value for member in typing.get_args(annotation) for value in literal_values(member))


SPEC_BACKENDS = literal_values(Compute.model_fields["backend"].annotation)
SPEC_ORCHESTRATORS = literal_values(Compute.model_fields["orchestrator"].annotation)
PLATFORM_NAMES = [p.name for p in PLATFORMS]


def test_the_table_has_the_spec_s_backends_in_its_order() -> None:
    assert BACKENDS == SPEC_BACKENDS


def test_each_backend_has_one_platform_per_orchestrator_it_takes() -> None:
    assert set(ORCHESTRATED_BACKENDS) < set(SPEC_BACKENDS)
    for backend in SPEC_BACKENDS:
        orchestrators = [p.orchestrator for p in PLATFORMS if p.backend == backend]
        wanted = list(SPEC_ORCHESTRATORS) if backend in ORCHESTRATED_BACKENDS else [None]
        assert orchestrators == wanted, backend
    assert len(set(PLATFORM_NAMES)) == len(PLATFORMS) == len(SPEC_BACKENDS) - 1 + len(SPEC_ORCHESTRATORS)


@pytest.mark.parametrize("backend", SPEC_BACKENDS)
@pytest.mark.parametrize("orchestrator", [None, *SPEC_ORCHESTRATORS])
def test_a_spec_s_platform_is_its_backend_with_the_orchestrator_in_force(
    backend: str, orchestrator: str | None
) -> None:
    group = {"name": "gpu", "instance_type": "g6.12xlarge", "min_count": 1, "max_count": 1}
    compute = {"backend": backend, "groups": [group]} | ({"orchestrator": orchestrator} if orchestrator else {})
    spec = ClusterSpec.model_validate({"name": "lab", "compute": compute})
    found = spec.platform
    assert found.backend == backend
    if backend in ORCHESTRATED_BACKENDS:
        # Unset, the backend's first orchestrator (HyperPod: slurm) is in force.
        assert found.orchestrator == (orchestrator or SPEC_ORCHESTRATORS[0])
    else:
        # The rules refuse an orchestrator here; until then it changes nothing.
        assert found.orchestrator is None
    assert spec.effective_orchestrator == found.orchestrator
    assert found is platform_of(backend, spec.effective_orchestrator)


def test_an_unknown_backend_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^backend: got 'slurm', allowed: pcs, parallelcluster, hyperpod, eks$"):
        platform_of("slurm")


@pytest.mark.parametrize("platform", PLATFORMS, ids=PLATFORM_NAMES)
def test_a_record_agrees_with_itself(platform: Platform) -> None:
    # Exactly one scheduler.
    assert platform.runs_slurm != platform.uses_kubernetes
    # Roles: some of ROLES, in its order, compute always; login nodes wherever Slurm runs.
    assert platform.roles == tuple(role for role in ROLES if role in platform.roles)
    assert "compute" in platform.roles
    assert ("login" in platform.roles) == platform.runs_slurm
    # A reason exactly where a role is missing.
    assert (platform.why_no_head_node is None) == ("controller" in platform.roles)
    assert (platform.why_no_login_nodes is None) == ("login" in platform.roles)
    assert (platform.why_fewer_roles is None) == (platform.roles == ROLES)
    # The groups kiln adds are for roles it boots, and are valid group names.
    assert platform.controller_group is None or "controller" in platform.roles
    assert platform.login_group is None or "login" in platform.roles
    assert platform.system_group is None or platform.uses_kubernetes
    added = [g for g in (platform.controller_group, platform.login_group, platform.system_group) if g is not None]
    for name in (*added, *platform.reserved_groups):
        assert NODE_GROUP_NAME.fullmatch(name), name
    assert len(set(added)) == len(added)
    # kiln bakes only where nodes boot an image of the backend's own; Kubernetes nodes boot EKS's.
    assert (platform.bake_parent is None) == platform.uses_kubernetes
    # EFA to Lustre where kiln mounts the file system on Slurm nodes.
    assert not platform.lustre_efa or platform.runs_slurm
    assert platform.bootstrap_target.name in TARGETS and platform.bootstrap_target.name != "local"
    assert ("eks" in platform.services) == platform.uses_kubernetes
    # How lines name it: its backend, with the orchestrator where that is not the backend's default.
    default = platform is platform_of(platform.backend)
    assert platform.label == platform.backend if default else platform.label.startswith(f"{platform.backend} with ")
    assert platform.name == platform.backend if default else platform.name.startswith(f"{platform.backend}-")


@pytest.mark.parametrize("platform", PLATFORMS, ids=PLATFORM_NAMES)
def test_what_a_platform_s_nodes_are_is_its_bootstrap_target_s(platform: Platform) -> None:
    # Read from the one record, never held beside it: a platform and the bootstrap of its nodes cannot disagree.
    target = platform.bootstrap_target
    assert (platform.runs_slurm, platform.uses_kubernetes, platform.roles, platform.lustre_efa) == (
        target.runs_slurm,
        target.uses_kubernetes,
        target.roles,
        target.mounts_fsx,
    )
    assert not {"runs_slurm", "uses_kubernetes", "roles", "lustre_efa"} & {f.name for f in dataclasses.fields(Platform)}
    # The platforms whose nodes run one target share its record.
    assert all(other.bootstrap_target is target for other in PLATFORMS if other.bootstrap_target.name == target.name)


@pytest.mark.parametrize("backend", ORCHESTRATED_BACKENDS)
def test_an_orchestrated_backend_s_platforms_share_the_backend_s_facts(backend: str) -> None:
    mine = [p for p in PLATFORMS if p.backend == backend]
    for field in ("title", "reserved_groups", "node_limit", "kiln_launch_template"):
        assert len({getattr(p, field) for p in mine}) == 1, field


# The modules issue 36 moved the backend facts out of, and the others that decide them: none may test a backend (or
# platform, or orchestrator) against a name of its own, nor keep a table keyed by backend names.
CLEAN = (
    "kiln/spec/rules",
    "kiln/stacks/backends",
    "kiln/preflight/plan.py",
    "kiln/aws/remote",
    "kiln/ci/ready.py",
    "kiln/cli/ci.py",
    "kiln/spec/models.py",
    "kiln/stacks/compute.py",
    "kiln/stacks/network.py",
    "kiln/catalog/code_server.py",
    "kiln/catalog/network.py",
    "kiln/node_config",
    "kiln/bootstrap/config.py",
    "kiln/bootstrap/image_recipe.py",
)
NAMES = {*BACKENDS, *PLATFORM_NAMES, *SPEC_ORCHESTRATORS}
# What holds a backend, a platform or an orchestrator: the last name of the expression (spec.compute.backend,
# effective_orchestrator, _platform(spec), ...).
HOLDER = re.compile(r"backend|orchestrator|platform|target", re.IGNORECASE)


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _names_in(node: ast.AST) -> set[str]:
    """Return the backend, platform and orchestrator names NODE spells as string constants (alone or in a tuple,
    list or set)."""
    members = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {m.value for m in members if isinstance(m, ast.Constant) and m.value in NAMES}


def _tests_a_backend(node: ast.AST, literal_types: set[int]) -> bool:
    """Return whether NODE compares what holds a backend with a backend's name, keys a dict by backend names, or spells
    two of them in one tuple, list or set (but the spec's Literal types, whose ids are LITERAL_TYPES)."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return any(HOLDER.search(_last_name(o)) for o in operands) and any(_names_in(o) for o in operands)
    if isinstance(node, ast.Dict):
        return any(key is not None and _names_in(key) for key in node.keys)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return id(node) not in literal_types and len(_names_in(node)) >= 2
    return False


def backend_tests(source: str) -> list[str]:
    """Return each backend test in SOURCE as `line: code`, outermost first (pydantic needs the spec's Literal types
    spelled out, so they are none)."""
    tree = ast.parse(source)
    literal_types = {
        id(node.slice)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and _last_name(node.value) == "Literal"
    }
    found = [node for node in ast.walk(tree) if _tests_a_backend(node, literal_types)]
    lines, end = [], (0, 0)
    for node in sorted(found, key=lambda n: (n.lineno, n.col_offset)):
        if (node.lineno, node.col_offset) < end:
            continue  # inside a place already found, such as the tuple of `backend in ("pcs", "eks")`
        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        lines.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return lines


def _sources() -> list[Path]:
    paths = [ROOT / name for name in CLEAN]
    return sorted(p for path in paths if path.exists() for p in ([path] if path.is_file() else path.rglob("*.py")))


def test_no_module_tests_a_backend_against_its_name() -> None:
    sources = _sources()
    assert {ROOT / "kiln/spec/rules/compute.py", ROOT / "kiln/preflight/plan.py"} <= set(sources)
    assert {ROOT / "kiln/node_config/translate.py", ROOT / "kiln/bootstrap/image_recipe.py"} <= set(sources)
    assert any("aws/remote" in str(path) for path in sources)
    found = {str(path.relative_to(ROOT)): backend_tests(path.read_text()) for path in sources}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_check_finds_each_kind_of_backend_test() -> None:
    # It must be able to fail: every way the modules used to spell a backend fact is found, line by line.
    source = """\
if spec.compute.backend == "pcs":
    pass
if backend in ("pcs", "eks") or spec.effective_orchestrator != "slurm":
    pass
if _platform(spec) == "hyperpod-eks":
    pass
SERVICES = {"pcs": ("pcs",), "eks": ("eks",)}
BACKENDS = ("pcs", "parallelcluster", "hyperpod", "eks")
"""
    assert backend_tests(source) == [
        '1: spec.compute.backend == "pcs"',
        '3: backend in ("pcs", "eks")',
        '3: spec.effective_orchestrator != "slurm"',
        '5: _platform(spec) == "hyperpod-eks"',
        '7: {"pcs": ("pcs",), "eks": ("eks",)}',
        '8: ("pcs", "parallelcluster", "hyperpod", "eks")',
    ]


def test_the_check_leaves_other_uses_of_the_same_words() -> None:
    # A Session Manager target's kind, an AWS service's name and a lookup on the table are not backend tests.
    source = """\
if target.kind == "hyperpod":
    eks = session.client("eks", region_name=region)
if "eks" in plan.services or spec.platform is PCS or platform.backend == HYPERPOD.backend:
    pass
"""
    assert backend_tests(source) == []
