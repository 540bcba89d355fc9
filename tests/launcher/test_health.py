"""kiln-launch health: one line per check, judged against the catalog, on a simulated node root with fake tools
(nvidia-smi, neuron-ls, fi_info, scontrol) that answer as the real ones do; it drains and resumes only as it should."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.catalog.platforms import service_fact
from kiln.launcher import bounded, health, slurm_node
from kiln.launcher.cli import main
from kiln.launcher.health_verdict import read as read_verdict
from kiln.launcher.health_verdict import verdict_path
from tests.support.efa_node import FI_INFO_EFA, simulate_efa_node
from tests.support.launcher import SUBPROCESS_TIMEOUT_S, clean_env

P5, TRN1 = "p5.48xlarge", "trn1.32xlarge"
CHECKS = ("gpus", "gpu-errors", "gpu-xid", "neuron", "efa", "nccl-plugin", "shared-fs", "container-space")
HEALTHY_ECC = "0, 0, No"
XID_79 = "6,1201,88120000,-;NVRM: Xid (PCI:0000:53:00): 79, pid=4121, name=python, GPU has fallen off the bus."
SLEEP = shutil.which("sleep")
XID_13 = "4,1188,86000000,-;NVRM: Xid (PCI:0000:53:00): 13, pid=4121, name=python, Graphics Exception"


def tool(bin_dir: Path, name: str, body: str) -> Path:
    """Write an executable shell script NAME into BIN_DIR."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def fake_nvidia_smi(bin_dir: Path, gpus: int = 8, ecc: dict[int, str] | None = None, remap: str = "No") -> None:
    """nvidia-smi answering kiln's three queries for GPUS GPUs; ECC: index -> 'volatile, aggregate, pending'."""
    bus = [f"00000000:{0x53 + i:02X}:00.0" for i in range(gpus)]
    count = "\\n".join(f"{i}, {bus[i]}" for i in range(gpus))
    errors = "\\n".join(f"{i}, {bus[i]}, {(ecc or {}).get(i, HEALTHY_ECC)}" for i in range(gpus))
    remaps = "\\n".join(f"{bus[i]}, {remap if i == 0 else 'No'}" for i in range(gpus))
    tool(
        bin_dir,
        "nvidia-smi",
        f"""case "$1" in
  --query-gpu=index,pci.bus_id) printf '{count}\\n' ;;
  --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,*) printf '{errors}\\n' ;;
  --query-remapped-rows=*) printf '{remaps}\\n' ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac""",
    )


def fake_neuron_ls(bin_dir: Path, devices: int) -> None:
    listing = json.dumps([{"neuron_device": i, "nc_count": 2} for i in range(devices)])
    tool(bin_dir, "neuron-ls", f"[ \"$1\" = --json-output ] || exit 2\nprintf '%s\\n' {shlex.quote(listing)}")


def fake_scontrol(bin_dir: Path, log: Path, state: str = "IDLE", reason: str = "") -> None:
    """scontrol that logs each call's argv and shows a node in STATE with REASON."""
    shown = f"NodeName=gpu-1 Arch=x86_64 State={state}" + (f" Reason={reason}" if reason else "") + " Partitions=gpu"
    # One line per call, its arguments ended by the unit separator (a reason holds spaces).
    quoted = shlex.quote(str(log))
    logged = f'printf \'%s\\037\' "$@" "SLURM_CONF=$SLURM_CONF" >> {quoted}; echo >> {quoted}'
    tool(bin_dir, "scontrol", f"{logged}\n[ \"$1\" = show ] && printf '%s\\n' {shlex.quote(shown)}\nexit 0")


def calls(log: Path) -> list[list[str]]:
    """Return each call's argv (without the SLURM_CONF the fake appends)."""
    return [line.split("\037")[:-2] for line in log.read_text().splitlines()] if log.exists() else []


def make_node(
    tmp_path: Path,
    instance: str = P5,
    *,
    gpus: int = 8,
    ecc: dict[int, str] | None = None,
    remap: str = "No",
    kmsg: tuple[str, ...] = (),
    efa_devices: int = 32,
    plugin: bool = True,
    neuron_devices: int | None = None,
    lustre: str | None = "lustre",
) -> Path:
    """Lay out a node root and fake tools for INSTANCE; return the root (its tools are in tmp_path/bin)."""
    root = tmp_path / "node"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    simulate_efa_node(
        root, devices=efa_devices, plugin="libnccl-net-ofi.so" if plugin else None, fi_info=efa_devices > 0
    )
    if efa_devices:
        # The shared simulation's fi_info answer, from sh: most tests here run it.
        answer = shlex.quote(FI_INFO_EFA)
        tool(root / "opt/amazon/efa/bin", "fi_info", f"[ \"$*\" = '-p efa' ] || exit 2\nprintf %s {answer}")
    etc = root / "etc/kiln"
    etc.mkdir(parents=True)
    (etc / "instance-type").write_text(f"{instance}\n")
    checkpoints = root / "fsx/checkpoints"
    checkpoints.mkdir(parents=True)
    lines = [f"KILN_CHECKPOINT_DIR={shlex.quote(str(checkpoints))}", "KILN_CLUSTER_NAME=llm"]
    if lustre is not None:
        lines.append("KILN_LUSTRE_MOUNT=/fsx")
        mounts = root / "proc/self/mounts"
        mounts.parent.mkdir(parents=True)
        mounts.write_text(
            "/dev/nvme0n1p1 / ext4 rw,relatime 0 0\n"
            f"fs-0123.fsx.us-east-1.amazonaws.com@tcp:/abcdef {root}/fsx {lustre} rw,flock,lazystatfs 0 0\n"
        )
    (etc / "launcher.env").write_text("\n".join(lines) + "\n")
    (etc / "container-cache").write_text("/scratch/kiln-containers\n")
    (root / "scratch/kiln-containers").mkdir(parents=True)
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kmsg").write_text("".join(f"{line}\n" for line in ("6,1,0,-;Linux version 6.1", *kmsg)))
    if instance == P5:
        fake_nvidia_smi(bin_dir, gpus=gpus, ecc=ecc, remap=remap)
    if neuron_devices is not None:
        fake_neuron_ls(bin_dir, neuron_devices)
    return root


@pytest.fixture(autouse=True)
def node_env(monkeypatch, tmp_path):
    """Only the test's tools: no system directories searched, no checkpoint root but launcher.env's."""
    monkeypatch.setattr(health, "SYSTEM_DIRS", ())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("KILN_CHECKPOINT_DIR", raising=False)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-1")
    # No real scontrol may answer for these tests: the fakes are the only Slurm.
    for directory in ("/usr/bin", "/bin"):
        if (Path(directory) / "scontrol").exists():
            monkeypatch.setenv("PATH", str(tmp_path / "bin"))
            break


def run_health(capsys, root: Path, *args: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Run kiln-launch health on ROOT; return the exit code, check -> (status, detail), and stderr."""
    code = main(["health", "--root", str(root), "--min-free-gib", "0", *args])
    out, err = capsys.readouterr()
    lines = {}
    for line in out.splitlines():
        status, rest = line.split(" ", 1)
        name, detail = rest.split(": ", 1)
        lines[name] = (status, detail)
    return code, lines, err


def statuses(lines: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: status for name, (status, _) in lines.items()}


def test_a_healthy_p5_passes_every_check_in_order(capsys, tmp_path):
    root = make_node(tmp_path, kmsg=(XID_13,))
    code, lines, err = run_health(capsys, root)
    assert (code, err) == (0, "")
    assert list(lines) == list(CHECKS)
    assert statuses(lines) == {**dict.fromkeys(CHECKS, "ok"), "neuron": "n/a"}
    assert lines["gpus"][1] == "nvidia-smi lists 8 GPU(s); p5.48xlarge has 8"
    assert lines["gpu-xid"][1] == "no fatal Xid in the kernel log since boot (1 other Xid(s))"
    assert lines["efa"][1].startswith("32 EFA device(s) (p5.48xlarge has 32); fi_info -p efa lists the efa provider")
    assert lines["shared-fs"][1] == f"checkpoint root {root}/fsx/checkpoints answers on lustre at {root}/fsx"
    assert lines["container-space"][1].startswith(f"{root}/scratch/kiln-containers: ")


def test_a_missing_gpu_fails(capsys, tmp_path):
    code, lines, _ = run_health(capsys, make_node(tmp_path, gpus=7))
    assert code == 1
    assert lines["gpus"] == ("FAIL", "nvidia-smi lists 7 GPU(s); p5.48xlarge has 8")


def test_no_nvidia_smi_on_a_gpu_type_fails(capsys, tmp_path):
    root = make_node(tmp_path)
    (tmp_path / "bin/nvidia-smi").unlink()
    code, lines, _ = run_health(capsys, root)
    assert code == 1
    assert lines["gpus"] == ("FAIL", "nvidia-smi not found (PATH, /usr/bin): p5.48xlarge has 8 GPUs")


@pytest.mark.parametrize(
    ("ecc", "remap", "expected"),
    [
        ({3: "2, 2, No"}, "No", "GPU 3 (00000000:56:00.0): 2 uncorrectable ECC error(s) since the driver loaded"),
        ({5: "0, 0, Yes"}, "No", "GPU 5 (00000000:58:00.0): a retired page is pending (reset the GPU)"),
        ({}, "Yes", "GPU 00000000:53:00.0: row remapping failed (replace the GPU)"),
    ],
)
def test_uncorrectable_memory_errors_fail(capsys, tmp_path, ecc, remap, expected):
    code, lines, _ = run_health(capsys, make_node(tmp_path, ecc=ecc, remap=remap))
    assert code == 1
    assert lines["gpu-errors"] == ("FAIL", expected)


def test_errors_corrected_long_ago_are_shown_not_judged(capsys, tmp_path):
    code, lines, _ = run_health(capsys, make_node(tmp_path, ecc={1: "0, 4, No"}))
    assert code == 0
    assert lines["gpu-errors"][0] == "ok"
    assert lines["gpu-errors"][1].endswith("(4 uncorrectable over the GPUs' lifetime)")


def test_a_fatal_xid_since_boot_fails_and_names_it(capsys, tmp_path):
    code, lines, _ = run_health(capsys, make_node(tmp_path, kmsg=(XID_13, XID_79)))
    assert code == 1
    assert lines["gpu-xid"] == (
        "FAIL",
        "fatal Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS on PCI:0000:53:00 since boot: reboot or replace "
        "the node",
    )


def test_the_fatal_xids_are_the_catalogs_reset_and_reboot_actions():
    fatal = service_fact("nvidia", "fatal_xids").value
    # Reset or reboot in NVIDIA's catalog; an application's own fault (13, 31, 43, 94: RESTART_APP) is not the node's.
    assert {"48", "79", "95", "119", "120"} <= set(fatal)
    assert not {"13", "31", "43", "94"} & set(fatal)


def test_a_missing_efa_device_fails(capsys, tmp_path):
    code, lines, _ = run_health(capsys, make_node(tmp_path, efa_devices=31))
    assert code == 1
    assert lines["efa"] == ("FAIL", "31 EFA device(s); p5.48xlarge has 32")


def test_a_missing_efa_provider_fails(capsys, tmp_path):
    root = make_node(tmp_path)
    (root / "opt/amazon/efa/bin/fi_info").write_text("#!/bin/sh\necho 'fi_getinfo: -61' >&2\nexit 1\n")
    code, lines, _ = run_health(capsys, root)
    assert code == 1
    assert lines["efa"] == ("FAIL", "fi_info -p efa lists no efa provider (exit 1, fi_getinfo: -61)")


def test_a_missing_nccl_plugin_fails(capsys, tmp_path):
    code, lines, _ = run_health(capsys, make_node(tmp_path, plugin=False))
    assert code == 1
    assert lines["nccl-plugin"][0] == "FAIL"
    assert lines["nccl-plugin"][1].startswith("no aws-ofi-nccl plugin on LD_LIBRARY_PATH or in /opt/amazon/ofi-nccl")


@pytest.mark.parametrize(("devices", "status"), [(16, "ok"), (15, "FAIL")])
def test_trn1_counts_neuron_devices_and_skips_the_gpu_checks(capsys, tmp_path, devices, status):
    root = make_node(tmp_path, TRN1, efa_devices=8, plugin=False, neuron_devices=devices)
    code, lines, _ = run_health(capsys, root)
    assert code == (0 if status == "ok" else 1)
    assert lines["neuron"] == (status, f"neuron-ls lists {devices} Neuron device(s); trn1.32xlarge has 16")
    for name in ("gpus", "gpu-errors", "gpu-xid"):
        assert lines[name] == ("n/a", "trn1.32xlarge has no GPU")
    assert lines["nccl-plugin"] == ("n/a", "trn1.32xlarge has Neuron devices: their collectives do not use NCCL")
    assert lines["efa"][0] == "ok"


def test_a_local_node_is_n_a_for_all_hardware_never_ok(capsys, tmp_path):
    root = tmp_path / "prefix"
    (root / "etc/kiln").mkdir(parents=True)
    (root / "etc/kiln/instance-type").write_text("local\n")
    (root / "etc/kiln/launcher.env").write_text(f"KILN_CHECKPOINT_DIR={root}/checkpoints\n")
    (root / "tmp").mkdir()
    code, lines, _ = run_health(capsys, root)
    assert code == 0
    hardware = CHECKS[:6]
    assert {name: lines[name][0] for name in hardware} == dict.fromkeys(hardware, "n/a")
    assert lines["shared-fs"] == ("ok", f"{root} answers (the checkpoint root {root}/checkpoints is not created yet)")
    assert lines["container-space"][1].startswith(f"{root}/scratch")


def test_the_default_container_floor_on_a_local_node_is_named_in_the_line(capsys, tmp_path):
    root = tmp_path / "prefix"
    (root / "etc/kiln").mkdir(parents=True)
    (root / "etc/kiln/instance-type").write_text("local\n")
    (root / "etc/kiln/launcher.env").write_text(f"KILN_CHECKPOINT_DIR={root}/checkpoints\n")
    (root / "tmp").mkdir()
    assert main(["health", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"ok container-space: {root}/scratch" in out and "(floor 1 GiB)" in out


def test_low_container_space_fails_naming_path_and_floor(capsys, tmp_path):
    root = make_node(tmp_path)
    code = main(["health", "--root", str(root), "--min-free-gib", "1000000"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    line = next(line for line in lines if " container-space: " in line)
    assert line.startswith(f"FAIL container-space: {root}/scratch/kiln-containers: ")
    assert line.endswith("below the floor of 1e+06 GiB")


@pytest.mark.parametrize("store", ["/var/lib/containerd", None])
def test_without_kilns_record_containers_go_to_the_runtimes_store_or_nowhere(capsys, tmp_path, store):
    root = make_node(tmp_path)
    (root / "etc/kiln/container-cache").unlink()
    if store:
        (root / store.lstrip("/")).mkdir(parents=True)
    code, lines, _ = run_health(capsys, root)
    assert code == 0
    if store:
        assert lines["container-space"][0] == "ok"
        assert lines["container-space"][1].startswith(f"{root}{store}: ")
    else:
        assert lines["container-space"] == (
            "n/a",
            "no container storage on this node (/etc/kiln/container-cache, /var/lib/containerd, /var/lib/docker)",
        )


def test_a_hung_shared_file_system_fails_within_the_timeout(capsys, tmp_path, monkeypatch):
    root = make_node(tmp_path)
    # The probe's child blocks on the file system as a hung Lustre mount would; the program must not.
    hang = "import sys, time\nif '/fsx' in sys.argv[1]:\n    time.sleep(60)\n"
    monkeypatch.setattr(bounded, "PROBE_CODE", hang + bounded.PROBE_CODE)
    begun = time.monotonic()
    code, lines, _ = run_health(capsys, root, "--timeout", "0.5")
    assert time.monotonic() - begun < 10
    assert code == 1
    assert lines["shared-fs"] == ("FAIL", f"{root}/fsx (lustre): no answer within 0.5 s (a hung mount or disk)")
    assert lines["container-space"][0] == "ok"


def test_a_stuck_gpu_driver_fails_within_the_timeout(capsys, tmp_path):
    root = make_node(tmp_path)
    tool(tmp_path / "bin", "nvidia-smi", f"exec {SLEEP} 60")
    begun = time.monotonic()
    code, lines, _ = run_health(capsys, root, "--timeout", "0.5")
    assert time.monotonic() - begun < 10
    assert code == 1
    assert lines["gpus"] == (
        "FAIL",
        "nvidia-smi did not answer within 0.5 s (a stuck GPU driver): p5.48xlarge has 8 GPUs",
    )
    # Asked once: a driver that did not answer is not given another timeout.
    assert lines["gpu-errors"] == ("FAIL", "not asked: nvidia-smi did not answer before (a stuck GPU driver)")
    assert time.monotonic() - begun < 3


@pytest.mark.parametrize(
    ("lustre", "expected"),
    [("ext4", "{root}/fsx is not a lustre mount (ext4 is mounted there)"), (None, None)],
)
def test_an_fsx_mount_that_is_not_lustre_fails(capsys, tmp_path, lustre, expected):
    root = make_node(tmp_path, lustre=lustre)
    code, lines, _ = run_health(capsys, root)
    if expected is None:
        # No FSx on this cluster (no KILN_LUSTRE_MOUNT): only the checkpoint root is asked.
        assert lines["shared-fs"] == ("ok", f"checkpoint root {root}/fsx/checkpoints answers")
        return
    assert code == 1
    assert lines["shared-fs"] == ("FAIL", expected.format(root=root))


def test_the_fsx_mount_gone_from_the_mount_table_fails(capsys, tmp_path):
    root = make_node(tmp_path)
    (root / "proc/self/mounts").write_text("/dev/nvme0n1p1 / ext4 rw 0 0\n")
    code, lines, _ = run_health(capsys, root)
    assert code == 1
    assert lines["shared-fs"] == ("FAIL", f"{root}/fsx is not a lustre mount (nothing is mounted there)")


def test_a_vanished_checkpoint_root_and_parent_fail(capsys, tmp_path):
    root = make_node(tmp_path, lustre=None)
    (root / "fsx/checkpoints").rmdir()
    (root / "fsx").rmdir()
    code, lines, _ = run_health(capsys, root)
    assert code == 1
    assert lines["shared-fs"] == (
        "FAIL",
        f"neither the checkpoint root {root}/fsx/checkpoints nor {root}/fsx exists",
    )


def test_the_checkpoint_dir_flag_names_the_root_to_ask(capsys, tmp_path):
    root = make_node(tmp_path, lustre=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = main(["--checkpoint-dir", str(elsewhere), "health", "--root", str(root), "--min-free-gib", "0"])
    assert code == 0
    assert f"ok shared-fs: checkpoint root {elsewhere} answers\n" in capsys.readouterr().out


def test_drain_sets_the_first_fail_as_the_reason_through_scontrols_argv(capsys, tmp_path, monkeypatch):
    root = make_node(tmp_path, gpus=7, efa_devices=31)
    log = tmp_path / "scontrol.log"
    fake_scontrol(tmp_path / "bin", log)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    code, _, err = run_health(capsys, root, "--drain")
    assert code == 1
    reason = "kiln-health: gpus: nvidia-smi lists 7 GPU(s); p5.48xlarge has 8"
    assert calls(log) == [
        ["show", "node", "gpu-1", "--oneliner"],
        ["update", "NodeName=gpu-1", "State=DRAIN", f"Reason={reason}"],
    ]
    assert err == f"kiln-launch health: drained node gpu-1: {reason}\n"
    # scontrol talks to the cluster SLURM_CONF names (the local cluster sets it).
    assert log.read_text().count(f"SLURM_CONF={tmp_path / 'slurm.conf'}") == 2


def test_drain_uses_the_node_flag_and_trims_the_reason(capsys, tmp_path):
    root = make_node(tmp_path, ecc={i: "3, 3, Yes" for i in range(8)})
    log = tmp_path / "scontrol.log"
    fake_scontrol(tmp_path / "bin", log)
    assert run_health(capsys, root, "--drain", "--node", "p5-st-7")[0] == 1
    update = calls(log)[-1]
    assert update[:3] == ["update", "NodeName=p5-st-7", "State=DRAIN"]
    assert update[3].startswith("Reason=kiln-health: gpu-errors: GPU 0 (00000000:53:00.0): 3 uncorrectable")
    assert len(update[3]) == len("Reason=") + slurm_node.MAX_REASON_CHARS and update[3].endswith("...")


@pytest.mark.parametrize(
    ("reason", "resumed"),
    [
        ("kiln-health: gpus: nvidia-smi lists 7 GPU(s); p5.48xlarge has 8 [root@2026-12-07T17:00:00]", True),
        ("disk swap by the admin [alice@2026-12-07T17:00:00]", False),
        ("kiln-hang: rank 3 on gpu-1 stopped [root@2026-12-07T17:00:00]", False),
    ],
)
def test_a_healthy_node_resumes_only_a_drain_of_its_own(capsys, tmp_path, reason, resumed):
    root = make_node(tmp_path)
    log = tmp_path / "scontrol.log"
    fake_scontrol(tmp_path / "bin", log, state="IDLE+DRAIN", reason=reason)
    code, _, err = run_health(capsys, root, "--drain")
    assert code == 0
    updates = [call for call in calls(log) if call[0] == "update"]
    assert updates == ([["update", "NodeName=gpu-1", "State=RESUME"]] if resumed else [])
    assert err.startswith("kiln-launch health: resumed node gpu-1" if resumed else "kiln-launch health: node gpu-1")


def test_an_unhealthy_node_someone_else_drained_keeps_their_reason(capsys, tmp_path):
    root = make_node(tmp_path, gpus=6)
    log = tmp_path / "scontrol.log"
    fake_scontrol(tmp_path / "bin", log, state="IDLE+DRAIN", reason="RMA ticket 42 [alice@2026-12-07T17:00:00]")
    code, _, err = run_health(capsys, root, "--drain")
    assert code == 1
    assert [call[0] for call in calls(log)] == ["show"]
    assert "already drained by someone else (RMA ticket 42" in err


def test_drain_without_scontrol_is_one_line_and_keeps_the_verdict(capsys, tmp_path):
    root = make_node(tmp_path, gpus=7)
    code, _, err = run_health(capsys, root, "--drain")
    assert code == 1
    assert err == "kiln-launch health: scontrol is not on PATH (not a Slurm node?): node gpu-1 left as it is\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["health", "--timeout", "0"], "health: argument --timeout: expected a positive number of seconds (got '0')"),
        (["health", "--timeout", "soon"], "expected a positive number of seconds (got 'soon')"),
        (["health", "--min-free-gib", "-1"], "--min-free-gib: expected a non-negative number of GiB (got '-1')"),
        (["health", "--root", "/nonexistent/kiln"], "health: --root: /nonexistent/kiln is not a directory"),
        (["health", "--bogus"], "health: unrecognized arguments: --bogus"),
        (["--nproc-per-node", "2", "health"], "health: --nproc-per-node is a launch option"),
        (["helth"], "did you mean 'health'?"),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kiln-launch: error: ")
    assert message in err


def test_json_is_one_object_with_the_documented_shape(capsys, tmp_path):
    root = make_node(tmp_path, gpus=7)
    assert main(["health", "--root", str(root), "--json", "--min-free-gib", "0"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"checks", "healthy", "node", "instance_type", "elapsed_s", "slurm", "replacement"}
    assert [c["check"] for c in report["checks"]] == list(CHECKS)
    assert all(set(c) == {"check", "status", "detail"} for c in report["checks"])
    assert report["checks"][0] == {
        "check": "gpus",
        "status": "FAIL",
        "detail": "nvidia-smi lists 7 GPU(s); p5.48xlarge has 8",
    }
    assert (report["healthy"], report["node"], report["instance_type"], report["slurm"]) == (
        False,
        "gpu-1",
        P5,
        None,
    )
    assert isinstance(report["elapsed_s"], float) and report["elapsed_s"] < 30


def test_no_timeout_lets_the_checks_run_into_slurms_kill(tmp_path):
    limit = service_fact("slurm", "health_check_program").value["kill_after_s"]
    assert limit == 60
    args = health.build_parser().parse_args(["--timeout", "1000"])
    node = health.describe(os.environ, make_node(tmp_path), args, started=time.monotonic(), checkpoint_flag=None)
    # However long each step may take, all of them end where scontrol's show and update still fit before the kill.
    assert 4 * health.DEFAULT_TIMEOUT_S <= node.budget.timeout() <= limit - 2 * slurm_node.TIMEOUT_S - health.STARTUP_S


def test_it_imports_no_torch_and_finishes_in_seconds(tmp_path):
    root = tmp_path / "prefix"
    (root / "etc/kiln").mkdir(parents=True)
    (root / "etc/kiln/instance-type").write_text("local\n")
    (root / "etc/kiln/launcher.env").write_text(f"KILN_CHECKPOINT_DIR={root}/checkpoints\n")
    program = (
        "import json, sys, time\n"
        "from kiln.launcher.cli import main\n"
        f"code = main(['health', '--root', {str(root)!r}])\n"
        "print(json.dumps({'code': code, 'torch': 'torch' in sys.modules}))\n"
    )
    begun = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={k: v for k, v in clean_env().items() if k != "PATH"},
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    took = time.monotonic() - begun
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"code": 0, "torch": False}
    assert took < 10, took


def test_drain_leaves_the_verdict_a_running_jobs_launcher_reads_and_a_manual_run_does_not(capsys, tmp_path):
    root = make_node(tmp_path, gpus=7)
    fake_scontrol(tmp_path / "bin", tmp_path / "scontrol.log")
    path = verdict_path(root, "gpu-1")
    run_health(capsys, root)
    assert not path.exists()
    run_health(capsys, root, "--drain")
    verdict = read_verdict(path)
    assert verdict is not None and verdict.node == "gpu-1" and verdict.healthy is False
    assert verdict.failures[0] == "gpus: nvidia-smi lists 7 GPU(s); p5.48xlarge has 8"
    assert verdict.drain.startswith("drained node gpu-1")
