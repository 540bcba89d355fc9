"""Neuron nodes: processes per NeuronCore (LNC-aware), neuron-ls through a stub on PATH, and the check's verdicts."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kiln.catalog import instance_type
from kiln.launcher import neuron
from kiln.launcher.check import FAILED, NOT_APPLICABLE, PASSED, NodeFacts, judge_run, overall, screen
from kiln.launcher.errors import UsageError
from kiln.launcher.launch import local_accelerators
from kiln.launcher.neuron import NeuronDevice, NeuronScan, parse_neuron_ls
from tests.support.launcher import run_launcher

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

GIB = 1 << 30


def neuron_ls_output(devices: int, cores: int, *, lnc: int | None = None, instance: str | None = None) -> str:
    """Return ``neuron-ls --json-output`` as the Neuron tools print it: a list with one object per device."""
    entries = []
    for index in range(devices):
        entry = {
            "neuron_device": index,
            "bdf": f"{0x10 + index:02x}:1e.0",
            "connected_to": [(index - 1) % devices, (index + 1) % devices] if devices > 1 else None,
            "nc_count": cores,
            "memory_size": 32 * GIB,
            "neuron_processes": [],
        }
        # Newer aws-neuronx-tools add the instance, the LNC and the core ids; older ones do not.
        if instance is not None:
            entry = {"instance_type": instance, "instance_id": "i-0123456789abcdef0", **entry}
            entry["neuroncore_ids"] = list(range(index * cores, (index + 1) * cores))
        if lnc is not None:
            entry["logical_neuroncore_config"] = lnc
        entries.append(entry)
    return json.dumps(entries, indent=4)


def stub_neuron_ls(directory: Path, *, stdout: str = "", stderr: str = "", exit_code: int = 0) -> Path:
    """Write an executable neuron-ls into DIRECTORY that prints STDOUT/STDERR for --json-output and exits."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stdout").write_text(stdout)
    (directory / "stderr").write_text(stderr)
    script = directory / "neuron-ls"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--json-output" ] || { echo "stub neuron-ls: expected --json-output, got $*" >&2; exit 64; }\n'
        f'cat "{directory / "stdout"}"\n'
        f'cat "{directory / "stderr"}" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return script


def device_nodes(dev: Path, count: int) -> Path:
    """Make COUNT /dev/neuronN stand-ins under DEV."""
    dev.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (dev / f"neuron{index}").touch()
    return dev


def node(scan: NeuronScan, efa: int = 0) -> NodeFacts:
    """Return a CPU-only node (as a Neuron instance is to torch) with SCAN and EFA devices."""
    return NodeFacts(
        torch_version="2.13.0+cpu",
        cuda_version=None,
        cuda_available=False,
        nccl_version=None,
        cuda_devices=0,
        neuron=scan,
        efa_devices=tuple(f"rdmap{i}s27" for i in range(efa)),
        ofi_plugin=None,
    )


def listed(devices: int, cores: int, *, lnc: int | None = None, nodes: int | None = None, setting=None) -> NeuronScan:
    return NeuronScan(
        tool="/opt/aws/neuron/bin/neuron-ls",
        devices=tuple(NeuronDevice(index=i, cores=cores, lnc=lnc) for i in range(devices)),
        device_nodes=devices if nodes is None else nodes,
        lnc_setting=setting,
    )


def by_name(results) -> dict:
    return {r.name: r for r in results}


class TestProcessesPerNode:
    @pytest.mark.parametrize(
        ("name", "environ", "count", "how"),
        [
            ("trn1.32xlarge", {}, 32, "16 Trainium x 2 NeuronCores, LNC 1 (Trainium default)"),
            ("trn1n.32xlarge", {}, 32, "16 Trainium x 2 NeuronCores, LNC 1 (Trainium default)"),
            ("trn2.48xlarge", {}, 64, "16 Trainium2 x 8 NeuronCores, LNC 2 (Trainium2 default)"),
            ("trn2u.48xlarge", {}, 64, "16 Trainium2 x 8 NeuronCores, LNC 2 (Trainium2 default)"),
            ("trn2.3xlarge", {}, 4, "1 Trainium2 x 8 NeuronCores, LNC 2 (Trainium2 default)"),
            ("inf2.48xlarge", {}, 24, "12 Inferentia2 x 2 NeuronCores, LNC 1 (Inferentia2 default)"),
            (
                "trn2.48xlarge",
                {"NEURON_LOGICAL_NC_CONFIG": "1"},
                128,
                "16 Trainium2 x 8 NeuronCores, LNC 1 (NEURON_LOGICAL_NC_CONFIG)",
            ),
            (
                "trn1.32xlarge",
                {"NEURON_LOGICAL_NC_CONFIG": "1"},
                32,
                "16 Trainium x 2 NeuronCores, LNC 1 (NEURON_LOGICAL_NC_CONFIG)",
            ),
        ],
    )
    def test_one_process_per_logical_neuroncore(self, name, environ, count, how):
        assert local_accelerators(instance_type(name), environ) == (count, f"NeuronCores: {how}")

    def test_gpu_and_unknown_types_count_visible_cuda_devices(self):
        # This machine has no CUDA device: a p5 seen from here wants none (and detect() then starts one process).
        assert local_accelerators(instance_type("p5.48xlarge"), {}) == (0, "visible CUDA devices")
        assert local_accelerators(None, {"NEURON_LOGICAL_NC_CONFIG": "2"}) == (0, "visible CUDA devices")

    @pytest.mark.parametrize(
        ("name", "setting", "message"),
        [
            (
                "trn1.32xlarge",
                "2",
                r"NEURON_LOGICAL_NC_CONFIG: LNC 2 is not supported by Trainium \(trn1.32xlarge\): 1$",
            ),
            ("trn2.48xlarge", "4", r"LNC 4 is not supported by Trainium2 \(trn2.48xlarge\): 1 or 2$"),
            ("trn2.48xlarge", "0", r"LNC 0 is not supported"),
            ("trn2.48xlarge", "two", r"NEURON_LOGICAL_NC_CONFIG: expected .* got 'two'"),
        ],
    )
    def test_an_lnc_the_device_does_not_accept_is_a_usage_error(self, name, setting, message):
        with pytest.raises(UsageError, match=message):
            local_accelerators(instance_type(name), {"NEURON_LOGICAL_NC_CONFIG": setting})

    def test_dry_run_plans_neuroncores_and_the_neuron_efa_preset(self, tmp_path):
        script = tmp_path / "train.py"
        script.write_text("")
        done = run_launcher(["--dry-run", str(script)], env={"KILN_INSTANCE_TYPE": "trn1.32xlarge"})
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        assert plan["environment"]["nproc_per_node"] == 32
        assert plan["environment"]["sources"]["nproc_per_node"] == (
            "NeuronCores: 16 Trainium x 2 NeuronCores, LNC 1 (Trainium default)"
        )
        assert "--nproc-per-node=32" in plan["torchrun_args"]
        preset = {"value": "1", "source": "preset trn1.32xlarge"}
        assert plan["nccl_env"]["set"]["FI_EFA_USE_DEVICE_RDMA"] == preset
        assert plan["nccl_env"]["set"]["FI_EFA_FORK_SAFE"] == preset
        assert plan["nccl_env"]["set"]["FI_PROVIDER"] == {"value": "efa", "source": "preset trn1.32xlarge"}

    def test_dry_run_honours_lnc_and_the_flag(self, tmp_path):
        script = tmp_path / "train.py"
        script.write_text("")
        env = {"KILN_INSTANCE_TYPE": "trn2.48xlarge", "NEURON_LOGICAL_NC_CONFIG": "1"}
        lnc1 = json.loads(run_launcher(["--dry-run", str(script)], env=env).stdout)["environment"]
        assert (lnc1["nproc_per_node"], lnc1["sources"]["nproc_per_node"]) == (
            128,
            "NeuronCores: 16 Trainium2 x 8 NeuronCores, LNC 1 (NEURON_LOGICAL_NC_CONFIG)",
        )
        flagged = run_launcher(["--nproc-per-node", "8", "--dry-run", str(script)], env=env)
        assert json.loads(flagged.stdout)["environment"]["nproc_per_node"] == 8

    def test_dry_run_with_an_lnc_trainium_lacks_exits_2_in_one_line(self, tmp_path):
        script = tmp_path / "train.py"
        script.write_text("")
        done = run_launcher(
            ["--dry-run", str(script)], env={"KILN_INSTANCE_TYPE": "trn1.32xlarge", "NEURON_LOGICAL_NC_CONFIG": "2"}
        )
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "kiln-launch: error: NEURON_LOGICAL_NC_CONFIG: LNC 2 is not supported by Trainium (trn1.32xlarge): 1"
        ]


class TestNeuronLsOutput:
    def test_devices_and_logical_cores_of_a_trn1(self):
        devices = parse_neuron_ls(neuron_ls_output(16, 2))
        assert [d.index for d in devices] == list(range(16))
        assert {d.cores for d in devices} == {2} and {d.lnc for d in devices} == {None}

    def test_newer_fields_are_read_where_present(self):
        devices = parse_neuron_ls(neuron_ls_output(16, 4, lnc=2, instance="trn2.48xlarge"))
        assert (len(devices), sum(d.cores for d in devices), {d.lnc for d in devices}) == (16, 64, {2})

    def test_a_device_without_its_index_takes_its_position(self):
        entries = json.loads(neuron_ls_output(2, 2))
        for entry in entries:
            del entry["neuron_device"]
        assert [d.index for d in parse_neuron_ls(json.dumps(entries))] == [0, 1]

    def test_no_devices_is_an_empty_list(self):
        assert parse_neuron_ls("[]") == ()

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("neuron-ls: no devices", r"not JSON \(Expecting value at line 1\)"),
            ('{"neuron_device": 0, "nc_count": 2}', "expected a JSON list of devices, got a JSON dict"),
            ("[[0, 2]]", "device entry 0 is not a JSON object"),
            ('[{"neuron_device": 0}]', r"device entry 0 has no NeuronCore count \(nc_count: None\)"),
            ('[{"neuron_device": 0, "nc_count": "2"}]', r"nc_count: '2'"),
            ('[{"neuron_device": 0, "nc_count": true}]', r"nc_count: True"),
        ],
    )
    def test_malformed_output_is_named(self, text, message):
        with pytest.raises(ValueError, match=message):
            parse_neuron_ls(text)


class TestScan:
    def test_a_stub_neuron_ls_first_on_path(self, tmp_path):
        tool = stub_neuron_ls(tmp_path / "bin", stdout=neuron_ls_output(16, 2))
        dev = device_nodes(tmp_path / "dev", 16)
        (dev / "neuron_monitor").touch()  # not a device node: neuronN only
        environ = {"PATH": f"{tool.parent}{os.pathsep}/usr/bin:/bin", "NEURON_LOGICAL_NC_CONFIG": "1"}
        scan = neuron.scan(environ, tool_dirs=(), dev=dev)
        assert (scan.tool, scan.error, scan.device_nodes, scan.lnc_setting) == (str(tool), None, 16, "1")
        assert (len(scan.devices), scan.cores) == (16, 32)

    def test_the_standard_location_is_searched_after_path(self, tmp_path):
        tool = stub_neuron_ls(tmp_path / "opt-aws-neuron-bin", stdout=neuron_ls_output(1, 2))
        empty = tmp_path / "empty"
        empty.mkdir()
        scan = neuron.scan({"PATH": str(empty)}, tool_dirs=(str(tool.parent),), dev=tmp_path)
        assert scan.tool == str(tool) and scan.cores == 2

    def test_no_neuron_ls_anywhere(self, tmp_path):
        scan = neuron.scan(
            {"PATH": str(tmp_path)}, tool_dirs=(str(tmp_path / "absent"),), dev=device_nodes(tmp_path, 2)
        )
        assert scan == NeuronScan(tool=None, device_nodes=2)

    def test_an_empty_path_entry_is_not_the_current_directory(self, tmp_path, monkeypatch):
        stub_neuron_ls(tmp_path, stdout="[]")
        monkeypatch.chdir(tmp_path)
        assert neuron.find_neuron_ls({"PATH": f"{os.pathsep}{tmp_path / 'none'}"}, tool_dirs=()) is None

    def test_a_failing_neuron_ls_says_why_in_one_line(self, tmp_path):
        stderr = 'time="2025-01-01T00:00:00Z" level=fatal msg="Failed to load MLA system information"\nno driver\n'
        tool = stub_neuron_ls(tmp_path / "bin", stderr=stderr, exit_code=1)
        scan = neuron.scan({"PATH": str(tool.parent)}, tool_dirs=(), dev=tmp_path)
        assert scan.devices == ()
        assert scan.error == f"{tool} --json-output exited 1: no driver"

    def test_output_that_is_not_a_device_list_is_an_error(self, tmp_path):
        tool = stub_neuron_ls(tmp_path / "bin", stdout="+--------+\n| NEURON |\n")
        scan = neuron.scan({"PATH": str(tool.parent)}, tool_dirs=(), dev=tmp_path)
        assert scan.error.startswith(f"{tool} --json-output: output is not JSON")

    def test_a_hung_neuron_ls_is_given_up_on(self, tmp_path, monkeypatch):
        tool = tmp_path / "neuron-ls"
        tool.write_text("#!/bin/sh\nexec sleep 30\n")
        tool.chmod(0o755)
        monkeypatch.setattr(neuron, "TIMEOUT_SECONDS", 0.5)
        scan = neuron.scan({"PATH": str(tmp_path)}, tool_dirs=(), dev=tmp_path)
        assert scan.error == f"{tool} --json-output did not answer within 0.5s"


class TestCheckVerdicts:
    def test_healthy_trn1_passes_and_gpu_checks_do_not_apply(self):
        results = screen(instance_type("trn1.32xlarge"), node(listed(16, 2), efa=8))
        checks = by_name(results)
        assert {
            n: checks[n].status for n in ("accelerators", "neuron_cores", "neuron_device_nodes", "efa_devices")
        } == (dict.fromkeys(("accelerators", "neuron_cores", "neuron_device_nodes", "efa_devices"), PASSED))
        assert checks["accelerators"].detail == "16 neuron device(s) listed by neuron-ls; trn1.32xlarge has 16"
        assert checks["neuron_cores"].detail == (
            "32 NeuronCore(s) listed by neuron-ls; kiln-launch starts one process per NeuronCore: 32 "
            "(16 Trainium x 2 NeuronCores, LNC 1 (Trainium default))"
        )
        for name in ("cuda", "nccl", "ofi_nccl_plugin"):
            assert checks[name].status == NOT_APPLICABLE, name
        assert checks["cuda"].detail == "trn1.32xlarge has Neuron devices, no GPU"
        assert overall(results) == 0

    def test_trn2_counts_logical_cores_under_the_default_lnc(self):
        checks = by_name(screen(instance_type("trn2.48xlarge"), node(listed(16, 4, lnc=2), efa=16)))
        assert checks["neuron_cores"].status == PASSED
        assert checks["neuron_cores"].data == {"expected": 64, "lnc": 2, "listed": 64}

    def test_an_lnc_mismatch_between_node_and_launcher_fails_and_says_so(self):
        # The runtime on the node was set to LNC 1 elsewhere; the launcher, without the variable, plans for LNC 2.
        checks = by_name(screen(instance_type("trn2.48xlarge"), node(listed(16, 8, lnc=1), efa=16)))
        assert checks["neuron_cores"].status == FAILED
        assert checks["neuron_cores"].detail.endswith("; neuron-ls reports LNC 1")
        # With the variable set as the node has it, both sides agree.
        agreed = screen(instance_type("trn2.48xlarge"), node(listed(16, 8, lnc=1, setting="1"), efa=16))
        assert by_name(agreed)["neuron_cores"].status == PASSED

    def test_missing_neuron_ls_fails_naming_the_tool_and_its_package(self):
        checks = by_name(screen(instance_type("trn1.32xlarge"), node(NeuronScan(tool=None, device_nodes=16), efa=8)))
        assert checks["accelerators"].status == FAILED
        assert checks["accelerators"].detail == (
            "neuron-ls not found (searched PATH, /opt/aws/neuron/bin): install aws-neuronx-tools to count "
            "trn1.32xlarge's 16 Neuron devices"
        )
        assert checks["neuron_cores"].status == FAILED
        # The device nodes are there all the same: the driver loaded, only the tools are missing.
        assert checks["neuron_device_nodes"].status == PASSED

    @pytest.mark.parametrize(
        ("scan", "failing", "detail"),
        [
            (listed(15, 2), "accelerators", "15 neuron device(s) listed by neuron-ls; trn1.32xlarge has 16"),
            (listed(16, 1), "neuron_cores", "16 NeuronCore(s) listed by neuron-ls;"),
            (
                listed(16, 2, nodes=8),
                "neuron_device_nodes",
                "8 /dev/neuronN node(s); trn1.32xlarge has 16 Neuron devices",
            ),
            (
                NeuronScan(tool="/x/neuron-ls", error="/x/neuron-ls --json-output exited 1: no driver", device_nodes=0),
                "accelerators",
                "/x/neuron-ls --json-output exited 1: no driver",
            ),
            (
                listed(16, 2, setting="2"),
                "neuron_cores",
                "NEURON_LOGICAL_NC_CONFIG: LNC 2 is not supported by Trainium",
            ),
        ],
    )
    def test_a_broken_trn1_fails_the_screen(self, scan, failing, detail):
        results = screen(instance_type("trn1.32xlarge"), node(scan, efa=8))
        assert by_name(results)[failing].status == FAILED
        assert by_name(results)[failing].detail.startswith(detail)
        assert overall(results) == 1

    def test_neuron_devices_on_an_unknown_type_are_reported_not_judged(self):
        checks = by_name(screen(None, node(listed(2, 2)), "no instance type known"))
        assert checks["accelerators"].status == "informational"
        assert checks["accelerators"].detail.startswith("2 Neuron device(s) listed; nothing to compare with")
        assert checks["neuron_cores"].status == NOT_APPLICABLE

    def test_gpu_measurements_do_not_apply_on_a_neuron_node(self):
        # What the workers report on a Neuron node: gloo on the host CPUs, two ranks, no matmul.
        result = {
            "world_size": 2,
            "local_world_size": 2,
            "backend": "gloo",
            "device": "cpu",
            "allreduce_correct": True,
            "sweep": [{"nbytes": 1 << 20, "seconds": 0.01, "algbw_gbps": 0.1, "busbw_gbps": 0.1}],
            "matmul": [],
        }
        checks = by_name(judge_run(instance_type("trn1.32xlarge"), result, None))
        assert {n: checks[n].status for n in ("matmul", "allreduce_busbw", "network_transport")} == dict.fromkeys(
            ("matmul", "allreduce_busbw", "network_transport"), NOT_APPLICABLE
        )
        assert checks["matmul"].detail.startswith("Neuron devices: this check runs on GPUs only")
        assert "gloo on the host CPUs: busbw 0.100 GB/s" in checks["allreduce_busbw"].detail
        assert (
            checks["network_transport"].detail == "the Neuron collectives do not use NCCL: no NCCL transport to judge"
        )
        assert checks["allreduce_correct"].status == PASSED


NO_NEURON_HERE = shutil.which("neuron-ls") is None and not any(Path(d, "neuron-ls").exists() for d in neuron.TOOL_DIRS)
NO_NEURON_DEVICES_HERE = not any(Path("/dev").glob("neuron[0-9]*"))


@pytest.mark.slow
@pytest.mark.skipif(not NO_NEURON_DEVICES_HERE, reason="this machine has Neuron device nodes")
def test_check_on_a_trn1_with_a_stub_neuron_ls(tmp_path):
    tool = stub_neuron_ls(tmp_path / "bin", stdout=neuron_ls_output(16, 2))
    env = {"KILN_INSTANCE_TYPE": "trn1.32xlarge", "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}"}
    done = run_launcher(["check", "--json", "--max-bytes", "4096"], env=env)
    # This machine has no /dev/neuronN and no EFA: not ready, for exactly those reasons.
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert {n: checks[n]["status"] for n in ("accelerators", "neuron_cores", "allreduce_correct")} == dict.fromkeys(
        ("accelerators", "neuron_cores", "allreduce_correct"), PASSED
    )
    assert checks["neuron_device_nodes"]["detail"] == "0 /dev/neuronN node(s); trn1.32xlarge has 16 Neuron devices"
    assert {c["name"] for c in report["checks"] if c["status"] == FAILED} == {"neuron_device_nodes", "efa_devices"}
    for name in ("cuda", "nccl", "ofi_nccl_plugin", "matmul", "allreduce_busbw", "network_transport"):
        assert checks[name]["status"] == NOT_APPLICABLE, name
    assert report["facts"]["neuron"]["tool"] == str(tool)
    assert len(report["facts"]["neuron"]["devices"]) == 16


@pytest.mark.slow
@pytest.mark.skipif(not NO_NEURON_HERE, reason="this machine has neuron-ls installed")
def test_check_on_a_trn1_without_neuron_ls_names_the_package():
    done = run_launcher(["check", "--max-bytes", "4096"], env={"KILN_INSTANCE_TYPE": "trn1.32xlarge"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("kiln-launch check: NOT READY (instance type trn1.32xlarge")
    assert (
        "failed          accelerators       neuron-ls not found (searched PATH, /opt/aws/neuron/bin): "
        "install aws-neuronx-tools to count trn1.32xlarge's 16 Neuron devices"
    ) in done.stdout
