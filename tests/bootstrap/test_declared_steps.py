"""The declared step list: every step file is declared, holds its one step, and profiles name only declared steps."""

from __future__ import annotations

import re

import pytest

from kiln.bootstrap.profiles import PROFILES, TargetProfile
from kiln.bootstrap.render import SCRIPTS_DIR
from kiln.bootstrap.steps import NODE_CONTEXT, STEPS, Step, declared_steps
from kiln.contracts.backends import EKS_TARGET
from tests.support.bootstrap import DEFINITION, PACKAGE_PARTS, defined_functions, library_parts

DECLARED = (NODE_CONTEXT, *STEPS.values())


def test_every_step_file_is_declared():
    on_disk = sorted(p.relative_to(SCRIPTS_DIR).as_posix() for p in (SCRIPTS_DIR / "steps").iterdir())
    assert on_disk == sorted(step.file for step in DECLARED)


@pytest.mark.parametrize("step", DECLARED, ids=lambda step: step.name)
def test_declared_file_defines_exactly_its_step(step):
    path = SCRIPTS_DIR / step.file
    assert path.name == f"{step.name}.sh"
    text = path.read_text()
    assert DEFINITION.findall(text).count(step.name) == 1, f"{step.file} must define `{step.name}() {{` once"
    functions = defined_functions(path)
    assert step.name in functions
    others = sorted(set(functions) & {s.name for s in DECLARED} - {step.name})
    assert others == [], f"{step.file} also defines the steps {others}: one file per step"
    # Every function bash finds is written the house way, so the text check above sees them all.
    assert sorted(functions) == sorted(DEFINITION.findall(text))


@pytest.mark.parametrize("package", PACKAGE_PARTS, ids=lambda path: path.name)
def test_no_function_is_defined_in_two_files(package):
    # Bundles source every library part, the package manager's part of the node's OS and every step file into one
    # shell: a helper defined twice would silently replace the other.
    owners: dict[str, list[str]] = {}
    for path in [*library_parts(), package, *(SCRIPTS_DIR / step.file for step in DECLARED)]:
        for name in defined_functions(path):
            owners.setdefault(name, []).append(path.name)
    assert {name: files for name, files in owners.items() if len(files) > 1} == {}


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_profiles_name_only_declared_steps_of_their_phase(target):
    profile = PROFILES[target]
    for phase, names in (("install", profile.install_steps), ("configure", profile.configure_steps)):
        for name in names:
            assert name in STEPS, f"{target}: {name} is not declared in kiln/bootstrap/steps.py"
            assert STEPS[name].phase == phase, f"{target}: {name} is a {STEPS[name].phase} step"
    assert profile.steps[0] == NODE_CONTEXT


@pytest.mark.parametrize(
    ("install", "configure", "message"),
    [
        (("install_pyxsi",), (), "install_steps: got 'install_pyxsi', allowed: install_nvidia_driver"),
        ((), ("install_efa",), "configure_steps: got 'install_efa', allowed: configure_users"),
        (("node_context",), (), "install_steps: got 'node_context'"),
        (("install_efa", "install_efa"), (), "install_steps: got install_efa, install_efa, allowed: each step once"),
    ],
)
def test_a_profile_with_an_undeclared_step_is_refused(install, configure, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TargetProfile(
            target=EKS_TARGET,
            entry_point="x.sh",
            how_it_runs="test",
            default_role="worker",
            install_steps=install,
            configure_steps=configure,
            slurm_config=None,
        )


def test_declared_steps_keep_the_order_asked_for():
    names = ("install_pyxis", "install_enroot")
    assert tuple(step.name for step in declared_steps("install", names)) == names


# Variables an install step reads that are not pins, and why they need not be: they cannot differ between an image
# and a node that passed node_context, or they change no file the step leaves.
NOT_PINS = {
    # The node's OS and package manager: node_context refuses a bundle rendered for another OS.
    "KILN_OS": "os",
    "KILN_PKG": "os",
    "KILN_PACKAGE_FORMAT": "os",
    # In messages only; a sealed image names its target in /etc/kiln/baked, which verification checks.
    "KILN_TARGET": "message",
    "KILN_INSTANCE_TYPE": "message",
    "KILN_IMAGE_TITLE": "message",
    # Named by its digest, KILN_LAUNCHER_WHEEL_SHA256.
    "KILN_LAUNCHER_WHEEL": "digest",
    # The run itself: where it writes, its bundle, its retries, the file just fetched, the Python a venv starts from.
    "KILN_ROOT": "run",
    "KILN_BUNDLE_DIR": "run",
    "KILN_RETRY_ATTEMPTS": "run",
    "KILN_FETCHED": "run",
    "KILN_CHANGED": "run",
    "KILN_PYTHON": "run",
    "KILN_VENV": "run",
    # The downloads cache (npm's cache inside it): gone from a sealed image, refilled by a node that installs.
    "KILN_CACHE_DIR": "run",
    # An image build (phase bake) installs for every role; only a node booting unbaked skips what its role does not
    # run (the Prometheus agent off the Slurm exporter's node), and such a node checks no marker.
    "KILN_PHASE": "role",
    "KILN_NODE_ROLE": "role",
    "KILN_SLURM_EXPORTER_ROLE": "role",
    "KILN_CODE_SERVER_ROLE": "role",
}
# Instance facts (an image build reads image-facts.env): the pin that stands for them.
FACTS = {
    "KILN_GPU_COUNT": ("KILN_IMAGE_DEVICES",),
    "KILN_EFA_COUNT": ("KILN_IMAGE_DEVICES",),
    "KILN_NVSWITCH": ("KILN_IMAGE_DEVICES",),
    "KILN_NVLSM": ("KILN_IMAGE_DEVICES",),
    # The Neuron packages are listed only when a type has Neuron devices.
    "KILN_NEURON_COUNT": ("KILN_IMAGE_DEVICES", "KILN_NEURON_PACKAGES"),
}
INSTALL_STEPS = [step for step in STEPS.values() if step.phase == "install"]


@pytest.mark.parametrize("step", INSTALL_STEPS, ids=lambda step: step.name)
def test_every_variable_an_install_step_reads_is_pinned_or_cannot_change_what_it_installs(step):
    read = set(re.findall(r"KILN_[A-Z0-9_]+", (SCRIPTS_DIR / step.file).read_text()))
    for variable in sorted(read - set(NOT_PINS)):
        if variable in FACTS:
            assert set(FACTS[variable]) & set(step.pins), f"{step.name} reads {variable}: pin {FACTS[variable][0]}"
        else:
            assert variable in step.pins, f"{step.name} reads {variable}, which is not among its pins"


def test_pins_belong_to_install_steps_only():
    assert [step.name for step in STEPS.values() if step.phase != "install" and step.pins] == []
    with pytest.raises(ValueError, match="step configure_x: got pins KILN_X on a configure step, allowed: none"):
        Step(name="configure_x", phase="configure", pins=("KILN_X",))
    assert STEPS["install_efa"].pins_variable == "KILN_PINS_INSTALL_EFA"


# lib.sh's ways to fetch or install: an install step's business, which a baked image did at its bake.
FETCHING = ("install_packages", "ensure_packages", "install_kernel_build_packages", "add_signed_repository", "download")
FETCHING += ("fetch_artifact", "curl", "wget", "pip")


@pytest.mark.parametrize(
    "step", [NODE_CONTEXT, *(s for s in STEPS.values() if s.phase == "configure")], ids=lambda step: step.name
)
def test_steps_that_run_at_every_boot_fetch_and_install_nothing(step):
    # A baked image's boot runs these only; lib.sh refuses any download there, so one would stop the boot.
    words = set(re.findall(r"[a-z_]+", (SCRIPTS_DIR / step.file).read_text()))
    assert sorted(words & set(FETCHING)) == [], f"{step.name} fetches or installs: move that into an install step"
