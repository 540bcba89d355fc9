"""What differs by target is a TargetProfile field: the bootstrap's modules, its templates and the translation from a
spec ask the profile, never the target's name. What a target's nodes are is its BootstrapTarget's, the record the
backend table's platforms hold too: a profile derives the rest from it."""

from __future__ import annotations

import ast
import re

import pytest

from kiln.bootstrap.config import TARGETS
from kiln.bootstrap.profiles import LOCAL_TARGET, NODE_ROLE_NAMES, PROFILES, TargetProfile
from kiln.bootstrap.render import PACKAGE_DIR, TEMPLATES_DIR
from kiln.contracts.backends import EKS_TARGET, PCS_TARGET, PLATFORMS, ROLES
from tests.support.paths import ROOT

# A template that branches on the target's name: {% if target == "local" %}, {% if target in (...) %}.
_TEMPLATE_TARGET_TEST = re.compile(r"\btarget\s*(==|!=|\bin\b|\bnot in\b)")


def _is_target(node: ast.AST) -> bool:
    """Return whether NODE is a target: a name `target` or an attribute `.target` (config.target)."""
    return (isinstance(node, ast.Name) and node.id == "target") or (
        isinstance(node, ast.Attribute) and node.attr == "target"
    )


# The tables a target may be looked up in: the profiles, and the list of the targets' names.
_TARGET_TABLES = {"PROFILES", "TARGETS"}


def _is_table(node: ast.AST) -> bool:
    """Return whether NODE is a table of kiln's own that is neither of _TARGET_TABLES: a dict literal, or a name (a
    module's table) or attribute spelled in capitals (config.USER_STEP_ROLES)."""
    if isinstance(node, ast.Dict):
        return True
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lstrip("_").isupper() and name not in _TARGET_TABLES


def _is_literal(node: ast.AST) -> bool:
    """Return whether NODE is a string literal, or a tuple, list or set literal holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_literal(element) for element in node.elts)
    return False


def target_tests(source: str, filename: str) -> list[str]:
    """Return FILENAME:LINE of every test of a target against a string literal in SOURCE: a comparison (==, !=, in,
    not in), a match statement on a target, a table keyed by targets' names (a dict literal whose keys all are), or a
    lookup of a target in a table other than PROFILES and TARGETS (TABLE[target], TABLE.get(target), target in
    TABLE)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            hit = any(map(_is_target, operands)) and any(map(_is_literal, operands))
            hit = hit or (_is_target(node.left) and any(map(_is_table, node.comparators)))
        elif isinstance(node, ast.Match):
            hit = _is_target(node.subject)
        elif isinstance(node, ast.Subscript):
            hit = _is_target(node.slice) and _is_table(node.value)
        elif isinstance(node, ast.Call):
            func = node.func
            lookup = isinstance(func, ast.Attribute) and func.attr == "get" and _is_table(func.value)
            hit = lookup and bool(node.args) and _is_target(node.args[0])
        elif isinstance(node, ast.Dict):
            keys = [key.value if isinstance(key, ast.Constant) else None for key in node.keys]
            hit = bool(keys) and all(key in TARGETS for key in keys)
        else:
            hit = False
        if hit:
            found.append(f"{filename}:{node.lineno}")
    return sorted(found)


def test_the_check_finds_each_way_of_testing_a_target_by_name():
    source = """\
def decide(config, target):
    if config.target == "pcs":
        return 1
    if target in ("eks", "local") or "hyperpod" != target:
        return 2
    match config.target:
        case "local":
            return 3
    return {"pcs": 4}[target]
"""
    assert target_tests(source, "synthetic.py") == [
        "synthetic.py:2",
        "synthetic.py:4",
        "synthetic.py:4",
        "synthetic.py:6",
        "synthetic.py:9",
        "synthetic.py:9",
    ]


def test_the_check_finds_each_table_keyed_by_target():
    # The ways the bootstrap's config and image recipe used to hold facts per target, outside the profiles.
    source = """\
USER_STEP_ROLES = {"pcs": ("login", "worker"), "local": ("controller", "worker")}
_IMAGE_CODE_SERVER_ROLE = {"hyperpod": "login"}
def decide(config, target):
    allowed = USER_STEP_ROLES[config.target]
    if config.target in _IMAGE_CODE_SERVER_ROLE or target not in config.LUSTRE_EFA_TARGETS:
        return CODE_SERVER_ROLES.get(config.target, ())
    return allowed
"""
    assert target_tests(source, "synthetic.py") == [
        "synthetic.py:1",
        "synthetic.py:2",
        "synthetic.py:4",
        "synthetic.py:5",
        "synthetic.py:5",
        "synthetic.py:6",
    ]


def test_the_check_lets_a_profile_be_asked():
    source = """\
def decide(config, target):
    profile = PROFILES[target]
    check_choice("target", target, TARGETS)
    if config.target not in image_profile(config.image).targets or PROFILES.get(target) is None:
        return {"target": target, "local": config.local, "secured": service_fact(target, "imds_secured_roles")}
    if config.profile.daemons == "none" or profile.slurm_paths in ("image", "service"):
        return config.target
    return target == config.target
"""
    assert target_tests(source, "synthetic.py") == []


def test_no_bootstrap_module_tests_a_target_by_name():
    # The bootstrap's modules, and the translation of a spec into a bootstrap config.
    modules = sorted([*PACKAGE_DIR.rglob("*.py"), *(ROOT / "kiln/node_config").rglob("*.py")])
    assert len(modules) > 10
    assert {PACKAGE_DIR / "image_recipe.py", PACKAGE_DIR / "config.py"} <= set(modules)
    found = [hit for path in modules for hit in target_tests(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert found == [], "ask the target's TargetProfile (kiln.bootstrap.profiles) instead"


def test_no_template_tests_a_target_by_name():
    templates = sorted(TEMPLATES_DIR.rglob("*.j2"))
    assert templates
    assert [path.name for path in templates if _TEMPLATE_TARGET_TEST.search(path.read_text())] == []
    assert _TEMPLATE_TARGET_TEST.search('{% if target == "local" %}')


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_a_profile_runs_slurm_exactly_when_someone_writes_slurm_conf(target):
    profile = PROFILES[target]
    assert profile.target.runs_slurm == (profile.slurm_config is not None)
    assert profile.target.mounts_fsx == ("configure_fsx" in profile.configure_steps)


def test_each_platform_s_nodes_are_the_target_its_profile_holds():
    # One record per target: a platform and the profile of its bootstrap target read the same one, so whether Slurm
    # or Kubernetes runs, the roles and whether kiln mounts Lustre cannot differ between them.
    for platform in PLATFORMS:
        assert PROFILES[platform.bootstrap_target.name].target is platform.bootstrap_target, platform.name
    assert list(PROFILES) == [profile.target.name for profile in PROFILES.values()]
    held = {platform.bootstrap_target.name for platform in PLATFORMS}
    # The local cluster alone has no platform: its profile holds its own record.
    assert set(PROFILES) - held == {"local"} and PROFILES["local"].target is LOCAL_TARGET


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_a_profile_s_roles_derive_from_its_target_s(target):
    profile = PROFILES[target]
    assert tuple(NODE_ROLE_NAMES) == ROLES
    assert profile.node_roles == tuple(NODE_ROLE_NAMES[role] for role in profile.target.roles)
    # code-server: a login node, else the controller; never a worker, and nowhere where Kubernetes runs it as a pod.
    assert set(profile.code_server_roles) <= set(profile.node_roles) - {"worker"}
    assert not (profile.code_server_roles and profile.target.uses_kubernetes)
    assert profile.slurm_exporter_role in profile.node_roles or not profile.target.runs_slurm


def test_the_derived_roles_are_those_kiln_has_always_used():
    # What the tables keyed by target said before the profiles derived it (user steps, code-server, the Slurm
    # exporter): PCS runs the Slurm controller itself, EKS's nodes are workers, the local cluster's login is its
    # controller host.
    assert {name: profile.node_roles for name, profile in PROFILES.items()} == {
        "pcs": ("login", "worker"),
        "parallelcluster": ("controller", "login", "worker"),
        "hyperpod": ("controller", "login", "worker"),
        "eks": ("worker",),
        "local": ("controller", "worker"),
    }
    assert {name: profile.code_server_roles for name, profile in PROFILES.items()} == {
        "pcs": ("login",),
        "parallelcluster": ("login", "controller"),
        "hyperpod": ("login", "controller"),
        "eks": (),
        "local": ("controller",),
    }
    assert {name for name, profile in PROFILES.items() if profile.slurm_exporter_role == "login"} == {"pcs"}


_PROFILE = {"entry_point": "x.sh", "how_it_runs": "test", "default_role": "worker", "install_steps": ()}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"target": PCS_TARGET, "configure_steps": ("configure_fsx",)},
            "slurm_config: got None for target 'pcs', which runs Slurm: say who writes slurm.conf",
        ),
        (
            {"target": EKS_TARGET, "configure_steps": (), "slurm_config": "backend"},
            "slurm_config: got 'backend' for target 'eks', which runs no Slurm: leave it None",
        ),
        (
            {"target": PCS_TARGET, "configure_steps": (), "slurm_config": "backend"},
            "configure_steps: configure_fsx missing for target 'pcs', whose nodes kiln mounts Lustre on",
        ),
        (
            {"target": EKS_TARGET, "configure_steps": ("configure_fsx",)},
            "configure_steps: configure_fsx given for target 'eks', whose nodes kiln does not mount Lustre on",
        ),
    ],
)
def test_a_profile_that_contradicts_its_target_is_refused(fields, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TargetProfile(**_PROFILE, **fields)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("daemons", "System", "daemons: got 'System', allowed: systemd, none"),
        ("slurm_config", "None", "slurm_config: got 'None', allowed: kiln, backend, None"),
        ("boot_deadline", "resume", "boot_deadline: got 'resume', allowed: resume_timeout, bootstrap_timeout, None"),
    ],
)
def test_a_profile_with_an_unknown_choice_is_refused(field, value, message):
    fields = {"slurm_config": None, field: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        TargetProfile(
            target=EKS_TARGET,
            entry_point="x.sh",
            how_it_runs="test",
            default_role="worker",
            install_steps=(),
            configure_steps=(),
            **fields,
        )
