"""Turn launcher options into a plan (environment, instance type, NCCL env, job dir) and run it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from kiln.catalog import InstanceType
from kiln.launcher import (
    compile_cache,
    efa,
    health_verdict,
    heartbeat,
    imds,
    ncclenv,
    neuron,
    precompile,
    record,
    runner,
    slurm_node,
)
from kiln.launcher import environment as env_detect
from kiln.launcher import watchdog as hang_watchdog
from kiln.launcher.hardware import cuda_device_count
from kiln.launcher.paths import checkpoint_dir
from kiln.launcher.software import versions

# Set in the agent unless the user chose otherwise. When workers share the
# rendezvous TCP store, a restarted worker group can read the previous
# attempt's gloo/NCCL addresses and fail to connect (pytorch/pytorch#135712):
# exactly the restart that auto-resume depends on.
AGENT_DEFAULTS = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# PyTorch's flight recorder keeps this many collectives per process for the watchdog's dumps, unless the user sized it
# (TORCH_FR_BUFFER_SIZE, or its older name TORCH_NCCL_TRACE_BUFFER_SIZE): the size PyTorch's Flight Recorder
# tutorial recommends (https://docs.pytorch.org/tutorials/unstable/flight_recorder_tutorial.html).
FLIGHT_RECORDER_ENTRIES = "2000"
# NCCL's init and network lines only, enough for kiln.launcher.nccllog to see the transport; NCCL_DEBUG_FILE expands
# %h (host) and %p (pid) (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/logging.html).
TRANSPORT_DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
ALLOW_TCP_VARIABLE = "KILN_ALLOW_TCP"
# The record is written from the main thread and from the watchdog's (its verdict): one writer at a time.
_SAVING = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """The launcher's own command-line options, parsed."""

    nproc_per_node: int | None = None
    max_restarts: int = runner.DEFAULT_MAX_RESTARTS
    checkpoint_dir: str | None = None
    job_id: str | None = None
    rdzv_port: int | None = None
    nccl_env: tuple[str, ...] = ()
    run_record: str | None = None
    scheduler: str | None = None
    # Start the workers on a GPU node with EFA devices whose NCCL would fall back to TCP (kiln.launcher.efa).
    allow_tcp: bool = False
    # Run the workers under neuron_parallel_compile (kiln.launcher.precompile): Neuron nodes only.
    precompile: bool = False
    # The hang watchdog's limits (kiln.launcher.watchdog); None: $KILN_HANG_FACTOR / $KILN_HANG_MIN_S, else defaults.
    hang_factor: float | None = None
    hang_min_s: float | None = None


@dataclass(kw_only=True)
class LaunchPlan:
    """Everything decided before the workers start."""

    environment: env_detect.LaunchEnvironment
    instance: imds.InstanceTypeLookup
    nccl: ncclenv.NcclPlan
    job_dir: Path
    worker_env: dict[str, str]
    agent_env: dict[str, str]
    torchrun_args: list[str]
    max_restarts: int
    record_path: Path | None
    started: float
    efa: efa.EfaGate | None = None
    # The command torch.distributed.run's arguments follow under --precompile; None runs torchrun in-process.
    precompile: list[str] | None = None
    # This node's Neuron compile cache (kiln.launcher.compile_cache); None off Neuron nodes with kiln's FSx.
    compile_cache: compile_cache.CachePlan | None = None
    # The hang watchdog's limits; None for the readiness check, which runs no training script.
    hang: hang_watchdog.Settings | None = None
    # Each rank checks NCCL's transport after its first steps (a GPU node with EFA, TCP not allowed).
    transport_check: bool = False
    record: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON-ready plan (what --dry-run prints and the run record holds)."""
        return {
            "environment": self.environment.as_dict(),
            "instance_type": {"name": self.instance.name, "source": self.instance.source, "note": self.instance.note},
            "nccl_env": self.nccl.as_dict(),
            "job_dir": str(self.job_dir),
            "worker_env": self.worker_env,
            "agent_env": self.agent_env,
            "torchrun_args": self.torchrun_args,
            "max_restarts": self.max_restarts,
            "record_path": str(self.record_path) if self.record_path else None,
            "efa": self.efa.as_dict() if self.efa else None,
            "precompile": {"command": [*self.precompile, *self.torchrun_args]} if self.precompile else None,
            "compile_cache": self.compile_cache.as_dict() if self.compile_cache else None,
            "hang_watchdog": {"factor": self.hang.factor, "min_s": self.hang.min_s, "from": self.hang.source}
            if self.hang
            else None,
            "transport_check": self.transport_check,
        }


def prepare(
    options: LaunchOptions,
    *,
    target: str,
    target_args: list[str],
    module: bool,
    started: float,
    argv: list[str],
    environ: Mapping[str, str] = os.environ,
    keep_record: bool = True,
    efa_gate: bool = True,
) -> LaunchPlan:
    """Detect the environment and decide the launch; raise UsageError or LaunchError on bad input, and LaunchError
    on a GPU node with EFA devices whose NCCL would fall back to TCP (unless options.allow_tcp, or not EFA_GATE: the
    readiness check judges that itself)."""
    # Overrides first: a bad one is a usage error, reported before anything slow happens.
    overrides = ncclenv.parse_overrides(options.nccl_env, environ.get("KILN_NCCL_ENV"))
    ncclenv.check_overrides(overrides)
    instance = imds.lookup(environ)
    facts, _ = imds.catalog_entry(instance.name)
    wrapper = precompile.wrapper(facts, instance.name, environ) if options.precompile else None
    detected = env_detect.detect(
        environ,
        accelerators=lambda: local_accelerators(facts, environ),
        nproc_per_node=options.nproc_per_node,
        rdzv_port=options.rdzv_port,
        job_id=options.job_id,
        scheduler=options.scheduler,
    )
    nccl = ncclenv.plan(
        instance.name, environ=environ, overrides=overrides, node_file=ncclenv.node_environment(environ)
    )
    cache = compile_cache.choose(detected, environ, nccl)
    if cache is not None and cache.directory is not None:
        nccl = ncclenv.with_value(nccl, compile_cache.variable(), cache.directory, f"compile cache: {cache.how}")
    allow_tcp = options.allow_tcp or environ.get(ALLOW_TCP_VARIABLE, "").strip().lower() in ("1", "true", "yes")
    gate = efa.gate(facts, environ, allow_tcp=allow_tcp) if efa_gate else None
    # A launch that keeps no record (the readiness check's own workers) runs no hang watchdog either.
    hang = None
    if keep_record:
        hang = hang_watchdog.settings(environ, factor=options.hang_factor, min_s=options.hang_min_s)
    if gate is not None and gate.warning:
        print(f"kiln-launch: warning: {gate.warning}", file=sys.stderr)
    root = checkpoint_dir(environ, options.checkpoint_dir)
    job_dir = root / detected.job_id
    worker_env = {"KILN_JOB_ID": detected.job_id, "KILN_CHECKPOINT_DIR": str(root)}
    agent_env = {name: value for name, value in AGENT_DEFAULTS.items() if name not in environ}
    if instance.name:
        # Workers (and anything they launch) then never ask IMDS again.
        worker_env["KILN_INSTANCE_TYPE"] = instance.name
    if gate is not None:
        worker_env.update(gate.worker_env)
    record_path = None
    if keep_record:
        chosen = options.run_record or environ.get("KILN_RUN_RECORD")
        record_path = (
            Path(chosen)
            if chosen
            else record.default_path(
                job_dir, record.node_label(detected.node_rank, environ), started, environ.get(record.RESTART_VARIABLE)
            )
        )
    plan = LaunchPlan(
        environment=detected,
        instance=instance,
        nccl=nccl,
        job_dir=job_dir,
        worker_env=worker_env,
        agent_env=agent_env,
        torchrun_args=runner.torchrun_args(
            detected, target=target, target_args=target_args, module=module, max_restarts=options.max_restarts
        ),
        max_restarts=options.max_restarts,
        record_path=record_path,
        started=started,
        efa=gate,
        precompile=wrapper,
        compile_cache=cache,
        hang=hang,
        transport_check=gate is not None and gate.status == efa.READY and not allow_tcp,
    )
    plan.record = record.new_record(started, argv, environ) | plan.as_dict()
    plan.record["timings"]["prepare_s"] = round(time.time() - started, 4)
    return plan


def local_accelerators(facts: InstanceType | None, environ: Mapping[str, str]) -> tuple[int, str]:
    """Return the processes this node wants: one per NeuronCore on a Neuron type, else per visible GPU; and why."""
    if facts is not None and facts.neuron_count:
        # torchrun on Trainium runs one worker per (logical) NeuronCore, not per device.
        cores = neuron.logical_cores(facts, environ.get(neuron.LNC_VARIABLE))
        return cores.count, f"NeuronCores: {cores.how}"
    return cuda_device_count(), "visible CUDA devices"


def execute(plan: LaunchPlan, *, environ: MutableMapping[str, str] = os.environ) -> runner.LaunchResult:
    """Set the environment, run the workers, and keep the run record up to date."""
    lock = _claim_compile_cache(plan)
    try:
        return _execute(plan, environ)
    finally:
        if lock is not None:
            lock.close()


def _claim_compile_cache(plan: LaunchPlan) -> IO[str] | None:
    """Lock this node's compile cache directory (or the next free one, which then replaces it in the plan)."""
    if plan.compile_cache is None or plan.compile_cache.directory is None:
        return None
    directory, lock = compile_cache.claim(plan.compile_cache.directory)
    if directory != plan.compile_cache.directory:
        how = f"{plan.compile_cache.how}; {plan.compile_cache.directory} was in use by another launcher"
        plan.compile_cache = compile_cache.CachePlan(directory=directory, how=how)
        plan.nccl = ncclenv.with_value(plan.nccl, compile_cache.variable(), directory, f"compile cache: {how}")
        plan.record["nccl_env"] = plan.nccl.as_dict()
        plan.record["compile_cache"] = plan.compile_cache.as_dict()
    return lock


def _execute(plan: LaunchPlan, environ: MutableMapping[str, str]) -> runner.LaunchResult:
    applied = ncclenv.apply(plan.nccl, environ)
    environ.update(plan.worker_env)
    for name, value in plan.agent_env.items():
        environ.setdefault(name, value)
    plan.record["nccl_env"]["applied"] = applied
    plan.record["versions"] = versions(environ)
    plan.record["status"] = "running"
    watch = _start_watchdog(plan, environ) if plan.hang is not None and not plan.precompile else None
    _save(plan)
    began = time.time()
    try:
        if plan.precompile:
            result = precompile.run([*plan.precompile, *plan.torchrun_args])
        else:
            result = runner.launch(plan.torchrun_args, on_failed_attempt=lambda a: _failed_attempt(plan, a))
    finally:
        if watch is not None:
            watch.stop()
    finished = time.time()
    if watch is not None:
        result = _after_watchdog(plan, watch, result)
    plan.record.update(status=result.status, exit_code=result.exit_code, message=result.message)
    plan.record["failures"] = result.failures
    plan.record["timings"].update(
        launch_started_at=record.iso_time(began),
        finished_at=record.iso_time(finished),
        run_s=round(finished - began, 4),
        total_s=round(finished - plan.started, 4),
    )
    _save(plan)
    if result.message and (watch is None or watch.verdict is None):
        # (The watchdog printed its verdict's line when it acted.)
        print(f"kiln-launch: {result.status}: {result.message}", file=sys.stderr)
    return result


def heartbeat_dir(job_id: str, environ: Mapping[str, str]) -> Path | None:
    """Make this launch's heartbeat directory (this node, job, Slurm restart and launcher) under the node's TMPDIR,
    else the system's temporary directory; None when neither takes one.

    Node-local on purpose: every rank rewrites its file each second and only this node's launcher reads them, so
    the shared file system never sees that traffic, and a node that dies takes nothing another node reads with it.
    """
    prefix = f"kiln-heartbeat-{job_id}-r{environ.get(record.RESTART_VARIABLE, '0')}-"
    for root in dict.fromkeys([environ.get("TMPDIR"), None]):
        try:
            return Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        except OSError as error:
            failure = error
    print(f"kiln-launch: warning: no hang watchdog: cannot make a heartbeat directory ({failure})", file=sys.stderr)
    return None


def _start_watchdog(plan: LaunchPlan, environ: MutableMapping[str, str]) -> hang_watchdog.Watchdog | None:
    """Give the workers a fresh heartbeat directory and the flight recorder and NCCL settings the watchdog needs;
    start the watchdog (None: no directory could be made, and the run goes unwatched)."""
    assert plan.hang is not None
    directory = heartbeat_dir(plan.environment.job_id, environ)
    if directory is None:
        plan.record["watchdog"] = {"status": "off: no heartbeat directory"}
        return None
    added = {heartbeat.DIR_VARIABLE: str(directory)}
    if "TORCH_FR_BUFFER_SIZE" not in environ and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in environ:
        added["TORCH_FR_BUFFER_SIZE"] = FLIGHT_RECORDER_ENTRIES
    if plan.transport_check:
        added[heartbeat.TRANSPORT_VARIABLE] = "efa"
        if "NCCL_DEBUG" not in environ:
            # NCCL's log is ours to direct only when the user asked for none: then INIT and NET lines, to a file per
            # rank (NCCL expands %h to the host name and %p to the process id) that the rank itself reads.
            added.update({name: value for name, value in TRANSPORT_DEBUG.items() if name not in environ})
            if "NCCL_DEBUG_FILE" not in environ:
                added["NCCL_DEBUG_FILE"] = str(directory / "nccl.%h.%p.log")
    environ.update(added)
    plan.worker_env.update(added)
    plan.record["worker_env"] = dict(plan.worker_env)
    slurm_job = environ.get("SLURM_JOB_ID") if plan.environment.scheduler == "slurm" else None
    node = slurm_node.node_name(environ=environ)
    context = hang_watchdog.Context(
        heartbeat_dir=directory,
        flight_recorder_dir=plan.job_dir / "flight-recorder",
        node=node,
        slurm_job_id=slurm_job,
        # The node's scheduled health check leaves its verdict here (Slurm nodes; kiln.launcher.health_verdict).
        health_verdict=health_verdict.verdict_path(environ.get("KILN_ROOT") or "/", node) if slurm_job else None,
        # A user's job may not drain its node: the watchdog asks the node's root side (kiln.launcher.drain_request).
        node_root=Path(environ.get("KILN_ROOT") or "/") if slurm_job else None,
    )

    def keep_verdict(verdict: hang_watchdog.Verdict) -> None:
        plan.record.update(status=verdict.status, exit_code=verdict.exit_code, message=verdict.message)
        plan.record["watchdog"] = watch.summary()
        _save(plan)

    watch = hang_watchdog.Watchdog(context, plan.hang, environ=environ, on_verdict=keep_verdict)
    plan.record["watchdog"] = watch.summary()
    watch.start()
    return watch


def _failed_attempt(plan: LaunchPlan, attempt: dict[str, Any]) -> None:
    attempt["at"] = record.iso_time(float(attempt["at"]))
    plan.record["attempts"].append(attempt)
    _save(plan)


def _after_watchdog(
    plan: LaunchPlan, watch: hang_watchdog.Watchdog, result: runner.LaunchResult
) -> runner.LaunchResult:
    """Fold the watchdog's view into the record (attempts with their last steps, its verdict); return the result,
    the watchdog's when it ended the run."""
    beats = [asdict(beat) for beat in hang_watchdog.read_beats(watch.context.heartbeat_dir)]
    final = watch.verdict.status if watch.verdict else result.status
    plan.record["attempts"] = record.attempts(plan.record["attempts"], beats, final)
    plan.record["watchdog"] = watch.summary()
    shutil.rmtree(watch.context.heartbeat_dir, ignore_errors=True)
    if watch.verdict is None:
        return result
    verdict = watch.verdict
    return runner.LaunchResult(exit_code=verdict.exit_code, status=verdict.status, message=verdict.message)


def _save(plan: LaunchPlan) -> None:
    with _SAVING:
        if plan.record_path is not None:
            plan.record_path = record.write(plan.record_path, plan.record)
            plan.record["record_path"] = str(plan.record_path)
