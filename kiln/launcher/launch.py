"""Turn launcher options into a plan (environment, instance type, NCCL env, job dir) and run it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kiln.catalog import InstanceType
from kiln.launcher import compile_cache, efa, imds, ncclenv, neuron, precompile, record, runner
from kiln.launcher import environment as env_detect
from kiln.launcher.hardware import cuda_device_count
from kiln.launcher.paths import checkpoint_dir
from kiln.launcher.software import versions

# Set in the agent unless the user chose otherwise. When workers share the
# rendezvous TCP store, a restarted worker group can read the previous
# attempt's gloo/NCCL addresses and fail to connect (pytorch/pytorch#135712):
# exactly the restart that auto-resume depends on.
AGENT_DEFAULTS = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


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
    gate = efa.gate(facts, environ, allow_tcp=options.allow_tcp) if efa_gate else None
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
        record_path = Path(chosen) if chosen else record.default_path(job_dir, detected.node_rank, started)
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
    )
    plan.record = record.new_record(started, argv) | plan.as_dict()
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
    _save(plan)
    began = time.time()
    if plan.precompile:
        result = precompile.run([*plan.precompile, *plan.torchrun_args])
    else:
        result = runner.launch(plan.torchrun_args)
    finished = time.time()
    plan.record.update(status=result.status, exit_code=result.exit_code, message=result.message)
    plan.record["failures"] = result.failures
    plan.record["timings"].update(
        launch_started_at=record.iso_time(began),
        finished_at=record.iso_time(finished),
        run_s=round(finished - began, 4),
        total_s=round(finished - plan.started, 4),
    )
    _save(plan)
    if result.message:
        print(f"kiln-launch: {result.status}: {result.message}", file=sys.stderr)
    return result


def _save(plan: LaunchPlan) -> None:
    if plan.record_path is not None:
        plan.record_path = record.write(plan.record_path, plan.record)
        plan.record["record_path"] = str(plan.record_path)
