"""LNet over EFA survives a reboot: a boot unit gives LNet the EFA interfaces again before the fsx mount, as FSx's
client guide has its setup do (https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html)."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config
from tests.support.node_root import Node, _efa_devices, _lnet_calls, make_node
from tests.support.systemd_units import needs_systemd, verify_unit

UNIT = "etc/systemd/system/kiln-lnet-efa.service"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_bundle(pcs_config(lustre_efa=True), tmp_path_factory.mktemp("efa-boot") / "bundle").directory


def _unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def _configured(tmp_path: Path, bundle: Path) -> Node:
    node = make_node(tmp_path, bundle)
    _efa_devices(node, 32)
    result = node.run("configure_fsx")
    assert result.returncode == 0, result.stderr
    return node


def test_the_boot_unit_runs_before_every_remote_mount_and_is_enabled(tmp_path: Path, bundle: Path) -> None:
    node = _configured(tmp_path, bundle)
    unit = _unit((node.root / UNIT).read_text())
    assert "remote-fs-pre.target" in unit["Unit"]["Before"].split()
    assert {"remote-fs-pre.target", "network-online.target"} <= set(unit["Unit"]["Wants"].split())
    assert "network-online.target" in unit["Unit"]["After"].split()
    assert (unit["Service"]["Type"], unit["Service"]["RemainAfterExit"]) == ("oneshot", "yes")
    assert unit["Install"]["WantedBy"] == "remote-fs.target"
    assert "systemctl enable kiln-lnet-efa.service" in node.calls()
    # The fstab mount is a remote one (_netdev): systemd orders it after remote-fs-pre.target, so after the unit.
    fstab = [line for line in (node.root / "etc/fstab").read_text().splitlines() if " /fsx lustre " in line]
    assert len(fstab) == 1 and "_netdev" in fstab[0].split()[3].split(",")


def test_a_second_boot_gives_lnet_the_efa_interfaces_again_and_mounts_nothing_itself(
    tmp_path: Path, bundle: Path
) -> None:
    node = _configured(tmp_path, bundle)
    first = [c for c in _lnet_calls(node) if c.startswith("lnetctl net add --net efa")]
    calls = len(node.calls())
    # A reboot: LNet has forgotten its interfaces (the shimmed lnetctl's state), and systemd starts the unit.
    (node.state / "lnet-efa").unlink()
    result = node.start_unit(UNIT)
    assert result.returncode == 0, result.stderr
    again = [c for c in _lnet_calls(node, since=calls) if c.startswith("lnetctl net add --net efa")]
    assert again == first and len(again) == 8
    assert not any(c.startswith(("mount ", "systemctl")) for c in node.calls()[calls:])
    # Still carrying them (a restart of the unit without a reboot): nothing is added twice.
    calls = len(node.calls())
    assert node.start_unit(UNIT).returncode == 0
    assert node.mutating_calls(since=calls) == []


@needs_systemd
def test_systemd_reads_the_boot_unit_without_a_complaint(tmp_path: Path, bundle: Path) -> None:
    node = _configured(tmp_path, bundle)
    said = verify_unit(
        node.root,
        "kiln-lnet-efa.service",
        targets=("sysinit", "basic", "shutdown", "remote-fs", "remote-fs-pre", "network-online"),
        programs=("/bin/bash",),
    )
    assert "kiln-lnet-efa" not in said, said


def test_the_boot_unit_runs_a_root_owned_copy_of_the_bundle_not_where_the_platform_unpacked_it(
    tmp_path: Path, bundle: Path
) -> None:
    # The node runs the bundle from wherever its platform put it (HyperPod documents no place; /tmp is emptied at boot).
    node = _configured(tmp_path, bundle)
    unit = _unit((node.root / UNIT).read_text())
    script = shlex.split(unit["Service"]["ExecStart"])[1]
    assert script == "/opt/kiln/boot-bundle/kiln-step"
    assert str(bundle) not in unit["Service"]["ExecStart"]
    copy = node.root / "opt/kiln/boot-bundle"
    for path in (copy, *copy.rglob("*")):
        if path.is_symlink():
            continue
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (0, 0), path
        assert not info.st_mode & 0o022, f"{path} is writable by others: {oct(info.st_mode)}"
    assert (copy / "steps/configure_fsx.sh").read_bytes() == (bundle / "steps/configure_fsx.sh").read_bytes()
    # A second run of the step keeps the copy as it is.
    before = copy.stat().st_ino
    assert node.run("configure_fsx").returncode == 0
    assert copy.stat().st_ino == before
