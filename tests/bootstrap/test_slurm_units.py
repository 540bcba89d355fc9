"""The systemd units kiln writes for Slurm: slurmd's type and start line agree (hyperpod-slurm's slurmd_unit fact)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from kiln.catalog.platforms import image_profile
from tests.support.node_root import hyperpod_node
from tests.support.systemd_units import needs_systemd, verify_unit

FACT = image_profile("hyperpod-slurm").fact("slurmd_unit").value
DROP_IN = "etc/systemd/system/slurmd.service.d/kiln.conf"
# A slurmd unit as Slurm builds it (etc/slurmd.service.in) under HyperPod's prefix: the AMI's own is not documented.
BASE_UNIT = """[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target

[Service]
Type=notify
ExecStart=/opt/slurm/sbin/slurmd --systemd $SLURMD_OPTIONS
KillMode=process

[Install]
WantedBy=multi-user.target
"""


def effective_service(*texts: str) -> dict[str, str]:
    """Return the [Service] settings of a unit and its drop-ins (TEXTS, in order) as systemd merges them: a later
    value wins, and an empty ExecStart= clears the ones before it."""
    merged: dict[str, str] = {}
    for text in texts:
        section = ""
        for line in text.splitlines():
            if line.startswith("["):
                section = line.strip()
            elif section == "[Service]" and "=" in line and not line.startswith(("#", ";")):
                key, value = line.split("=", 1)
                merged[key.strip()] = value.strip()
    return merged


def configured_worker(tmp_path) -> tuple[Path, str]:
    node = hyperpod_node(tmp_path, "10.1.0.5")
    result = node.run("configure_slurm")
    assert result.returncode == 0, result.stderr
    return node.root, (node.root / DROP_IN).read_text()


def test_slurmd_runs_with_the_flag_its_notify_type_needs(tmp_path):
    _, drop_in = configured_worker(tmp_path)
    service = effective_service(BASE_UNIT, drop_in)
    # The drop-in sets the type itself: what the AMI's unit says does not decide it.
    assert "Type=" in drop_in
    assert service["Type"] == FACT["type"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/slurm/sbin/slurmd"
    assert FACT["flag"] in argv, service["ExecStart"]
    assert not set(FACT["refused_with_flag"]) & set(argv), service["ExecStart"]
    assert argv[argv.index("--conf-server") + 1] == "10.1.0.9"


def test_the_drop_in_holds_against_a_unit_of_another_type(tmp_path):
    # Were the AMI's unit of another type, the drop-in's type still matches its start line.
    _, drop_in = configured_worker(tmp_path)
    service = effective_service(BASE_UNIT.replace("Type=notify", "Type=simple"), drop_in)
    assert service["Type"] == FACT["type"] and FACT["flag"] in shlex.split(service["ExecStart"])


@needs_systemd
def test_systemd_reads_the_drop_in_cleanly_and_merges_a_type_its_start_line_meets(tmp_path):
    root, _ = configured_worker(tmp_path)
    unit = root / "etc/systemd/system/slurmd.service"
    unit.write_text(BASE_UNIT)
    said = verify_unit(
        root,
        "slurmd.service",
        targets=("sysinit", "basic", "shutdown", "multi-user", "network-online", "remote-fs"),
        programs=("/opt/slurm/sbin/slurmd",),
    )
    assert "kiln.conf" not in said, said
    # The unit and the drop-ins systemd itself reads for it, in its order: their type and start line agree.
    merged = subprocess.run(
        ["systemd-analyze", "cat-config", f"--root={root}", "--no-pager", "systemd/system/slurmd.service"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"# {root}/{DROP_IN}" in merged
    service = effective_service(merged)
    assert service["Type"] == FACT["type"] and FACT["flag"] in shlex.split(service["ExecStart"])
