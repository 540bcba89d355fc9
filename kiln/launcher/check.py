"""``kiln-launch check``: is this node, or this job's nodes, ready to train?

    kiln-launch [--nproc-per-node N] check [--json] [--scope node|job] [--output PATH]
                [--min-bytes B] [--max-bytes B] [--warmup N] [--iters N] [--matmul-size N]

Environment screen: torch, CUDA and NCCL versions; accelerators against the
catalog's count for the instance type (GPUs as torch sees them; Neuron devices
as ``neuron-ls --json-output`` lists them, their NeuronCores against the
processes the launcher starts, and their /dev/neuronN nodes); EFA devices in
/sys/class/infiniband against the catalog's EFA interface count; the
aws-ofi-nccl plugin; the image (each install step's marker in
/etc/kiln/image against the pins of the bundle the node booted with,
/etc/kiln/bundle-pins.env, both under KILN_ROOT). Then the launcher starts
one worker per GPU (two on CPU or Neuron nodes, so the collective has peers)
for a GPU matmul sanity check, an all-reduce correctness check and an
all-reduce sweep whose bus bandwidth (nccl-tests formulas) must reach the
catalog's floor: intra-node for one node, inter-node for several. On an EFA GPU type, NCCL_DEBUG=INFO output must show
libfabric's efa provider; TCP sockets fail loudly. Nothing here runs on the
Neuron devices themselves: on a Neuron node the GPU checks are not_applicable.

Each check is passed, failed, not_applicable (nothing to check here: no GPU,
no Neuron device, no EFA, unknown instance type, no kiln image manifest) or
informational (measured, no floor, e.g. gloo on CPU). GPU, Neuron and EFA
checks on a machine without them are not_applicable, never passed.

``--scope node`` (default, fit for a Slurm prolog) checks this node alone;
``--scope job`` joins the job's other nodes through the scheduler, as a
training launch does.

Exit codes: 0 ready (no check failed); 1 not ready (a check failed, or the
workers could not run); 2 usage error.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kiln.catalog import InstanceType
from kiln.launcher import container, hardware, imds, nccllog, neuron
from kiln.launcher.arguments import SubcommandParser, integer_at_least, positive
from kiln.launcher.errors import UsageError
from kiln.launcher.image import ImageScan, root_of, scan_image
from kiln.launcher.launch import LaunchOptions, execute, prepare

PASSED, FAILED, NOT_APPLICABLE, INFORMATIONAL = "passed", "failed", "not_applicable", "informational"
EXIT_READY, EXIT_NOT_READY = 0, 1
# One process on CPU would all-reduce with itself; two exercise the collective.
CPU_PROCESSES = 2
GPU_SWEEP = {"min_bytes": 1 << 20, "max_bytes": 1 << 30, "warmup": 5, "iters": 20}
CPU_SWEEP = {"min_bytes": 1 << 10, "max_bytes": 1 << 20, "warmup": 1, "iters": 3}
# The workers run torch on CPU or CUDA; nothing here drives the Neuron devices.
NEURON_NOT_MEASURED = "Neuron devices: this check runs on GPUs only (no Neuron compute or collective benchmark)"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One line of the report."""

    name: str
    status: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class NodeFacts:
    """What the screen looks at on this node."""

    torch_version: str
    cuda_version: str | None
    cuda_available: bool
    nccl_version: str | None
    cuda_devices: int
    neuron: neuron.NeuronScan
    efa_devices: tuple[str, ...]
    ofi_plugin: str | None
    # Nothing kiln-made by default: a machine the bootstrap never ran on.
    image: ImageScan = field(default_factory=ImageScan)
    # Where the training Python runs: this node's, or the training container's (kiln.launcher.container).
    python_source: str = ""


_size = integer_at_least(4, "a byte count of at least 4")


def build_parser() -> argparse.ArgumentParser:
    """Return the check subcommand's parser."""
    parser = SubcommandParser(subcommand="check", prog="kiln-launch check", description="Readiness check for training.")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of a table")
    parser.add_argument("--scope", choices=("node", "job"), default="node", help="this node (default) or the job")
    parser.add_argument("--output", help="also write the JSON report to this file")
    parser.add_argument("--min-bytes", type=_size, help="smallest all-reduce (default 1 MiB on GPU, 1 KiB on CPU)")
    parser.add_argument("--max-bytes", type=_size, help="largest all-reduce (default 1 GiB on GPU, 1 MiB on CPU)")
    parser.add_argument("--warmup", type=positive, help="untimed all-reduces per size (default 5 GPU, 1 CPU)")
    parser.add_argument("--iters", type=positive, help="timed all-reduces per size (default 20 GPU, 3 CPU)")
    parser.add_argument("--matmul-size", type=positive, default=2048, help="matmul sanity matrix size (default 2048)")
    return parser


def gather_facts() -> NodeFacts:
    """Look at this node."""
    import torch

    from kiln.launcher.software import nccl_version

    available = torch.cuda.is_available()
    return NodeFacts(
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        cuda_available=available,
        nccl_version=nccl_version(),
        cuda_devices=hardware.cuda_device_count(),
        neuron=neuron.scan(),
        efa_devices=tuple(hardware.efa_devices()),
        ofi_plugin=hardware.ofi_nccl_plugin(),
        image=scan_image(root_of()),
        python_source=container.python_source(),
    )


def screen(instance: InstanceType | None, facts: NodeFacts, why_unknown: str | None = None) -> list[CheckResult]:
    """Judge this node's software and devices against the catalog entry INSTANCE."""
    results = [CheckResult(name="torch", status=INFORMATIONAL, detail=f"torch {facts.torch_version}")]
    if facts.python_source:
        results.append(CheckResult(name="python", status=INFORMATIONAL, detail=facts.python_source))
    expected_gpus = instance.gpu_count if instance else 0
    label = instance.name if instance else "this machine"
    if facts.cuda_available:
        detail = f"CUDA {facts.cuda_version}, {facts.cuda_devices} device(s)"
        results.append(CheckResult(name="cuda", status=PASSED, detail=detail))
        nccl_status = PASSED if facts.nccl_version else FAILED
        results.append(CheckResult(name="nccl", status=nccl_status, detail=f"NCCL {facts.nccl_version}"))
    elif expected_gpus:
        detail = f"CUDA is not usable, but {label} has {expected_gpus} GPUs"
        results.append(CheckResult(name="cuda", status=FAILED, detail=detail))
        results.append(CheckResult(name="nccl", status=FAILED, detail="no NCCL without CUDA"))
    else:
        detail = f"{label} has Neuron devices, no GPU" if _on_neuron(instance) else "no GPU on this machine"
        results.append(CheckResult(name="cuda", status=NOT_APPLICABLE, detail=detail))
        results.append(CheckResult(name="nccl", status=NOT_APPLICABLE, detail=detail))
    results.append(_accelerators(instance, facts, why_unknown))
    results.extend(_neuron_checks(instance, facts.neuron, why_unknown))
    results.append(_efa_devices(instance, facts, why_unknown))
    results.append(_ofi_plugin(instance, facts, why_unknown))
    results.append(_image(facts.image))
    return results


def judge_run(
    instance: InstanceType | None,
    result: dict[str, Any] | None,
    transport: nccllog.Transport | None,
    *,
    run_error: str | None = None,
    nccl_debug_note: str | None = None,
) -> list[CheckResult]:
    """Judge what the workers measured: matmul, all-reduce correctness and bandwidth, transport."""
    if result is None:
        return [CheckResult(name="workers", status=FAILED, detail=f"check workers did not finish: {run_error}")]
    on_gpu = result["device"] == "cuda"
    world = result["world_size"]
    nodes = max(1, world // max(1, result["local_world_size"]))
    results = [_matmul(instance, result, on_gpu)]
    correct = result["allreduce_correct"]
    detail = f"{result['backend']} all-reduce over {world} rank(s) on {nodes} node(s)"
    results.append(CheckResult(name="allreduce_correct", status=PASSED if correct else FAILED, detail=detail))
    results.append(_busbw(instance, result, on_gpu, world, nodes))
    results.append(_transport(instance, transport, on_gpu, nccl_debug_note))
    return results


def overall(results: list[CheckResult]) -> int:
    """Return the exit code for RESULTS: 1 if any failed, else 0."""
    return EXIT_NOT_READY if any(r.status == FAILED for r in results) else EXIT_READY


def run(
    options: LaunchOptions, check_argv: list[str], *, started: float, launcher_argv: list[str], dry_run: bool = False
) -> int:
    """Run the whole check and print the report; return the exit code."""
    args = build_parser().parse_args(check_argv)
    facts = gather_facts()
    defaults = GPU_SWEEP if facts.cuda_available else CPU_SWEEP
    sweep_args = {key: getattr(args, key) or value for key, value in defaults.items()}
    if sweep_args["min_bytes"] > sweep_args["max_bytes"]:
        raise UsageError(f"check: --min-bytes {sweep_args['min_bytes']} exceeds --max-bytes {sweep_args['max_bytes']}")
    nproc = options.nproc_per_node or (None if facts.cuda_available else CPU_PROCESSES)
    scope_options = LaunchOptions(
        **{**asdict(options), "nproc_per_node": nproc, "scheduler": "plain" if args.scope == "node" else None}
    )
    workdir = Path(tempfile.mkdtemp(prefix="kiln-check-"))
    try:
        result_path = workdir / "result.json"
        worker_args = [
            f"--result={result_path}",
            f"--min-bytes={sweep_args['min_bytes']}",
            f"--max-bytes={sweep_args['max_bytes']}",
            f"--warmup={sweep_args['warmup']}",
            f"--iters={sweep_args['iters']}",
            f"--matmul-size={args.matmul_size}",
        ]
        plan = prepare(
            scope_options,
            target="kiln.launcher.check_worker",
            target_args=worker_args,
            module=True,
            started=started,
            argv=launcher_argv,
            keep_record=False,
            # The check judges the plugin and the transport itself, and reports rather than refuses.
            efa_gate=False,
        )
        instance, why_unknown = imds.catalog_entry(plan.instance.name)
        if dry_run:
            print(json.dumps(plan.as_dict(), indent=2, sort_keys=True))
            return EXIT_READY
        log_pattern, debug_note = _nccl_debug(workdir) if facts.cuda_available else (None, None)
        outcome = execute(plan)
        result = json.loads(result_path.read_text()) if outcome.exit_code == 0 and result_path.exists() else None
        transport = nccllog.parse(_read_lines(log_pattern)) if log_pattern else None
        checks = screen(instance, facts, why_unknown) + judge_run(
            instance, result, transport, run_error=outcome.message, nccl_debug_note=debug_note
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    code = overall(checks)
    report = {
        "ready": code == EXIT_READY,
        "exit_code": code,
        "scope": args.scope,
        "instance_type": {"name": plan.instance.name, "source": plan.instance.source, "catalog": why_unknown or "ok"},
        "environment": plan.environment.as_dict(),
        "nccl_env": plan.nccl.as_dict(),
        "facts": asdict(facts),
        "checks": [asdict(c) for c in checks],
        "sweep": result["sweep"] if result else [],
        "transport": _transport_dict(transport),
        "duration_s": round(time.time() - started, 3),
    }
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.json else render(report))
    return code


def render(report: dict[str, Any]) -> str:
    """Return the human-readable report."""
    instance = report["instance_type"]
    lines = [
        f"kiln-launch check: {'READY' if report['ready'] else 'NOT READY'} "
        f"(instance type {instance['name'] or 'unknown'}, scope {report['scope']})"
    ]
    lines.extend(f"  {c['status']:<15} {c['name']:<18} {c['detail']}" for c in report["checks"])
    if report["sweep"]:
        lines.append("  all-reduce sweep:      bytes    algbw GB/s    busbw GB/s")
        lines.extend(f"  {p['nbytes']:>24,} {p['algbw_gbps']:>13.3f} {p['busbw_gbps']:>13.3f}" for p in report["sweep"])
    return "\n".join(lines)


def _on_neuron(instance: InstanceType | None) -> bool:
    return instance is not None and instance.neuron_count > 0


def _accelerators(instance: InstanceType | None, facts: NodeFacts, why_unknown: str | None) -> CheckResult:
    if _on_neuron(instance):
        return _neuron_devices(instance, facts.neuron)
    if instance and instance.accelerator:
        accelerator = instance.accelerator
        status = PASSED if facts.cuda_devices == accelerator.count else FAILED
        detail = f"{facts.cuda_devices} {accelerator.kind} device(s) visible; {instance.name} has {accelerator.count}"
        return CheckResult(name="accelerators", status=status, detail=detail)
    seen = ((facts.cuda_devices, "GPU(s) visible"), (len(facts.neuron.devices), "Neuron device(s) listed"))
    visible = [f"{count} {what}" for count, what in seen if count]
    if visible:
        reason = f"{instance.name} lists none" if instance else why_unknown
        detail = f"{', '.join(visible)}; nothing to compare with ({reason})"
        return CheckResult(name="accelerators", status=INFORMATIONAL, detail=detail)
    reason = f"{instance.name} has no accelerators" if instance else f"no GPU or Neuron device here; {why_unknown}"
    return CheckResult(name="accelerators", status=NOT_APPLICABLE, detail=reason)


def _neuron_devices(instance: InstanceType, scan: neuron.NeuronScan) -> CheckResult:
    expected = instance.neuron_count
    if scan.tool is None:
        searched = ", ".join(("PATH", *neuron.TOOL_DIRS))
        detail = (
            f"{neuron.NEURON_LS} not found (searched {searched}): install {neuron.TOOLS_PACKAGE} to count "
            f"{instance.name}'s {expected} Neuron devices"
        )
        return CheckResult(name="accelerators", status=FAILED, detail=detail)
    if scan.error:
        return CheckResult(name="accelerators", status=FAILED, detail=scan.error)
    found = len(scan.devices)
    status = PASSED if found == expected else FAILED
    detail = f"{found} neuron device(s) listed by {neuron.NEURON_LS}; {instance.name} has {expected}"
    return CheckResult(name="accelerators", status=status, detail=detail, data={"tool": scan.tool})


def _neuron_checks(
    instance: InstanceType | None, scan: neuron.NeuronScan, why_unknown: str | None
) -> list[CheckResult]:
    """Judge the NeuronCores neuron-ls lists and the /dev/neuronN nodes; not_applicable off Neuron types."""
    if not _on_neuron(instance):
        reason = f"{instance.name} has no Neuron devices" if instance else why_unknown
        return [
            CheckResult(name="neuron_cores", status=NOT_APPLICABLE, detail=str(reason)),
            CheckResult(name="neuron_device_nodes", status=NOT_APPLICABLE, detail=str(reason)),
        ]
    return [_neuron_cores(instance, scan), _neuron_device_nodes(instance, scan)]


def _neuron_cores(instance: InstanceType, scan: neuron.NeuronScan) -> CheckResult:
    try:
        expected = neuron.logical_cores(instance, scan.lnc_setting)
    except UsageError as error:
        return CheckResult(name="neuron_cores", status=FAILED, detail=str(error))
    data = {"expected": expected.count, "lnc": expected.lnc}
    if not scan.devices:
        detail = f"no {neuron.NEURON_LS} device list to count NeuronCores in; expected {expected.count}"
        return CheckResult(name="neuron_cores", status=FAILED, detail=detail, data=data)
    data["listed"] = scan.cores
    status = PASSED if scan.cores == expected.count else FAILED
    # Both sides count logical cores: neuron-ls reports them under the LNC in force, as the launcher plans for.
    detail = (
        f"{scan.cores} NeuronCore(s) listed by {neuron.NEURON_LS}; kiln-launch starts one process per "
        f"NeuronCore: {expected.count} ({expected.how})"
    )
    reported = sorted({device.lnc for device in scan.devices if device.lnc is not None})
    if reported and reported != [expected.lnc]:
        detail += f"; {neuron.NEURON_LS} reports LNC {', '.join(map(str, reported))}"
    return CheckResult(name="neuron_cores", status=status, detail=detail, data=data)


def _neuron_device_nodes(instance: InstanceType, scan: neuron.NeuronScan) -> CheckResult:
    # The runtime opens /dev/neuronN: a device listed but without its node here (a container started without the
    # devices passed in, a driver that did not load) cannot run a worker, whatever neuron-ls lists.
    expected = instance.neuron_count
    status = PASSED if scan.device_nodes == expected else FAILED
    detail = f"{scan.device_nodes} /dev/neuronN node(s); {instance.name} has {expected} Neuron devices"
    return CheckResult(name="neuron_device_nodes", status=status, detail=detail)


def _efa_devices(instance: InstanceType | None, facts: NodeFacts, why_unknown: str | None) -> CheckResult:
    found = len(facts.efa_devices)
    data = {"devices": list(facts.efa_devices)}
    if instance is None:
        return CheckResult(name="efa_devices", status=NOT_APPLICABLE, detail=f"{why_unknown}", data=data)
    if not instance.efa_supported:
        return CheckResult(name="efa_devices", status=NOT_APPLICABLE, detail=f"{instance.name} has no EFA", data=data)
    expected = instance.efa_interface_count
    status = PASSED if found >= expected else FAILED
    detail = f"{found} EFA device(s) in {hardware.INFINIBAND_SYSFS}; {instance.name} should have {expected}"
    return CheckResult(name="efa_devices", status=status, detail=detail, data=data)


def _ofi_plugin(instance: InstanceType | None, facts: NodeFacts, why_unknown: str | None) -> CheckResult:
    if instance is None:
        return CheckResult(name="ofi_nccl_plugin", status=NOT_APPLICABLE, detail=f"{why_unknown}")
    if _on_neuron(instance):
        # The Neuron collectives reach EFA through the OFI plugin aws-neuronx-collectives ships.
        detail = f"{instance.name} has Neuron devices: their collectives do not use NCCL or its plugin"
        return CheckResult(name="ofi_nccl_plugin", status=NOT_APPLICABLE, detail=detail)
    if not (instance.efa_supported and instance.gpu_count):
        detail = f"{instance.name} runs no NCCL over EFA"
        return CheckResult(name="ofi_nccl_plugin", status=NOT_APPLICABLE, detail=detail)
    if facts.ofi_plugin:
        return CheckResult(name="ofi_nccl_plugin", status=PASSED, detail=f"aws-ofi-nccl at {facts.ofi_plugin}")
    detail = "aws-ofi-nccl not found: NCCL will fall back to TCP sockets"
    return CheckResult(name="ofi_nccl_plugin", status=FAILED, detail=detail)


def _image(scan: ImageScan) -> CheckResult:
    """Judge the image manifest: every install step of the booted bundle ran, with the bundle's pinned values."""
    if scan.error:
        return CheckResult(name="image", status=FAILED, detail=f"cannot read the image manifest: {scan.error}")
    if scan.wanted is None:
        if not scan.markers:
            detail = f"no kiln image manifest on this node ({scan.image_dir})"
            return CheckResult(name="image", status=NOT_APPLICABLE, detail=detail)
        detail = f"{len(scan.markers)} install step marker(s) in {scan.image_dir}, but no bundle pins to compare with"
        return CheckResult(name="image", status=INFORMATIONAL, detail=detail, data={"markers": scan.markers})
    data = {"image_dir": scan.image_dir, "steps": sorted(scan.wanted)}
    mismatches = scan.mismatches()
    problems = [f"{step}: no marker {scan.image_dir}/{step}.env (the step never ran here)" for step in scan.missing]
    for miss in mismatches:
        image = "nothing" if miss.image is None else f"'{miss.image}'"
        problems.append(f"{miss.step}: {miss.variable} is {image} on the image, the bundle wants '{miss.wanted}'")
    if problems:
        data["missing"] = scan.missing
        data["mismatches"] = [asdict(miss) for miss in mismatches]
        detail = "; ".join(problems) + "; rebuild the image: kiln ami build --spec SPEC"
        return CheckResult(name="image", status=FAILED, detail=detail, data=data)
    detail = f"{len(scan.wanted)} install step(s) match the bundle's pins ({scan.image_dir})"
    return CheckResult(name="image", status=PASSED, detail=detail, data=data)


def _matmul(instance: InstanceType | None, result: dict[str, Any], on_gpu: bool) -> CheckResult:
    if not on_gpu:
        detail = NEURON_NOT_MEASURED if _on_neuron(instance) else "no GPU on this machine"
        return CheckResult(name="matmul", status=NOT_APPLICABLE, detail=detail)
    matmuls = result["matmul"]
    bad = [m for m in matmuls if not m["ok"]]
    worst = max((m["relative_error"] for m in matmuls), default=0.0)
    slowest = min((m["tflops_fp32"] for m in matmuls), default=0.0)
    detail = f"{len(matmuls)} GPU(s): worst relative error {worst:.2e}, slowest {slowest:.1f} TFLOPS fp32"
    if bad:
        detail = f"wrong results on rank(s) {', '.join(str(m['rank']) for m in bad)}; {detail}"
    return CheckResult(name="matmul", status=FAILED if bad else PASSED, detail=detail, data={"ranks": matmuls})


def _busbw(instance: InstanceType | None, result: dict, on_gpu: bool, world: int, nodes: int) -> CheckResult:
    largest = result["sweep"][-1]
    peak = largest["busbw_gbps"]
    data = {"busbw_gbps": peak, "nbytes": largest["nbytes"]}
    if world < 2:
        return CheckResult(name="allreduce_busbw", status=NOT_APPLICABLE, detail="one rank: no bus traffic", data=data)
    measured = f"busbw {peak:.3f} GB/s at {largest['nbytes']:,} bytes over {world} ranks"
    if _on_neuron(instance):
        # The workers ran gloo on the host CPUs: a figure about TCP between processes, not the Neuron collectives.
        detail = f"{NEURON_NOT_MEASURED}; gloo on the host CPUs: {measured}"
        return CheckResult(name="allreduce_busbw", status=NOT_APPLICABLE, detail=detail, data=data)
    if not on_gpu:
        return CheckResult(
            name="allreduce_busbw", status=INFORMATIONAL, detail=f"{measured} (gloo on CPU: no floor)", data=data
        )
    if instance is None or instance.busbw_floor_gbps is None:
        detail = f"{measured} (no catalog floor for this instance type)"
        return CheckResult(name="allreduce_busbw", status=INFORMATIONAL, detail=detail, data=data)
    floor = instance.busbw_floor_gbps.inter_node if nodes > 1 else instance.busbw_floor_gbps.intra_node
    scope = "inter-node" if nodes > 1 else "intra-node"
    data["floor_gbps"] = floor
    status = PASSED if peak >= floor else FAILED
    detail = f"{measured}; {scope} floor for {instance.name} is {floor} GB/s"
    return CheckResult(name="allreduce_busbw", status=status, detail=detail, data=data)


def _transport(
    instance: InstanceType | None, transport: nccllog.Transport | None, on_gpu: bool, debug_note: str | None
) -> CheckResult:
    if _on_neuron(instance):
        detail = "the Neuron collectives do not use NCCL: no NCCL transport to judge"
        return CheckResult(name="network_transport", status=NOT_APPLICABLE, detail=detail)
    if not on_gpu:
        return CheckResult(name="network_transport", status=NOT_APPLICABLE, detail="no NCCL on this machine")
    if instance is None or not instance.efa_supported:
        detail = "not an EFA instance type" if instance else "instance type unknown: no EFA expectation"
        return CheckResult(name="network_transport", status=NOT_APPLICABLE, detail=detail)
    data = _transport_dict(transport) or {}
    if transport is None or not transport.found:
        detail = f"no NCCL transport lines to judge{f' ({debug_note})' if debug_note else ''}"
        return CheckResult(name="network_transport", status=FAILED, detail=detail, data=data)
    if transport.tcp_fallback:
        detail = (
            f"NCCL FELL BACK TO TCP SOCKETS on {instance.name} (network {', '.join(transport.networks) or '?'}, "
            f"provider {', '.join(transport.providers) or 'none'}): expect a fraction of EFA bandwidth"
        )
        return CheckResult(name="network_transport", status=FAILED, detail=detail, data=data)
    if transport.uses_efa:
        detail = f"NCCL over libfabric efa ({', '.join(transport.networks)})"
        return CheckResult(name="network_transport", status=PASSED, detail=detail, data=data)
    detail = f"unexpected NCCL network {', '.join(transport.networks)} on an EFA instance type"
    return CheckResult(name="network_transport", status=FAILED, detail=detail, data=data)


def _nccl_debug(workdir: Path) -> tuple[str | None, str | None]:
    """Ask NCCL for its transport lines, without overriding a user's own NCCL_DEBUG settings."""
    if os.environ.get("NCCL_DEBUG", "INFO").upper() not in ("INFO", "TRACE"):
        return None, f"NCCL_DEBUG={os.environ['NCCL_DEBUG']} is set, so NCCL prints no transport lines"
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    os.environ.setdefault("NCCL_DEBUG_FILE", str(workdir / "nccl.%h.%p.log"))
    # NCCL expands %h (host) and %p (pid) itself; a glob finds every rank's file.
    return os.environ["NCCL_DEBUG_FILE"].replace("%h", "*").replace("%p", "*"), None


def _read_lines(pattern: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(glob.glob(pattern)):
        try:
            lines.extend(Path(path).read_text(errors="replace").splitlines())
        except OSError as error:
            print(f"kiln-launch: warning: cannot read NCCL log {path}: {error}", file=sys.stderr)
    return lines


def _transport_dict(transport: nccllog.Transport | None) -> dict[str, Any] | None:
    if transport is None:
        return None
    return {
        "networks": list(transport.networks),
        "providers": list(transport.providers),
        "aws_ofi_nccl": transport.aws_ofi_nccl,
        "plugin_missing": transport.plugin_missing,
        "tcp_fallback": transport.tcp_fallback,
        "evidence": list(transport.evidence),
    }
