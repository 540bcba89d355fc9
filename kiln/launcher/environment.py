"""Work out where the launcher runs: Slurm (HyperPod too), a Kubernetes PyTorchJob, or a plain machine.

Everything here reads a mapping of environment variables, so tests feed it the
variables the schedulers really set:

- Slurm (srun, one task per node): SLURM_JOB_ID, SLURM_STEP_NODELIST /
  SLURM_JOB_NODELIST / SLURM_NODELIST, SLURM_STEP_NUM_NODES / SLURM_JOB_NUM_NODES /
  SLURM_NNODES, SLURM_NODEID, SLURM_STEP_NUM_TASKS, SLURM_GPUS_ON_NODE.
- Kubeflow training operator, PyTorchJob: PET_NNODES, PET_NODE_RANK,
  PET_NPROC_PER_NODE, PET_MASTER_ADDR/PET_MASTER_PORT (also MASTER_ADDR,
  MASTER_PORT, node-level RANK and WORLD_SIZE); with an elastic policy
  PET_RDZV_ENDPOINT, PET_RDZV_ID and PET_NNODES as "min:max" instead.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kiln.launcher.errors import LaunchError, UsageError
from kiln.launcher.hostlist import expand

# SageMaker HyperPod writes this on every node of a cluster it manages.
HYPERPOD_MARKER = Path("/opt/ml/config/resource_config.json")
# torchrun's own default for a c10d endpoint without a port.
C10D_DEFAULT_PORT = 29400
# Jobs sharing a first node must not share a rendezvous port: derive it from the
# job id, below Linux's ephemeral range (32768+) so no outgoing socket holds it.
SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 10000

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_POD_SUFFIX = re.compile(r"-(?:master|worker)-\d+$")


@dataclass(frozen=True, kw_only=True)
class LaunchEnvironment:
    """Where this launcher runs and how its node joins the rendezvous."""

    scheduler: str
    flavor: str | None
    job_id: str
    nnodes: str
    node_rank: int | None
    rdzv_endpoint: str
    rdzv_is_host: bool | None
    nproc_per_node: int
    hosts: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """Return the JSON-ready form used by run records and reports."""
        return {
            "scheduler": self.scheduler,
            "flavor": self.flavor,
            "job_id": self.job_id,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "rdzv_endpoint": self.rdzv_endpoint,
            "rdzv_is_host": self.rdzv_is_host,
            "nproc_per_node": self.nproc_per_node,
            "hosts": list(self.hosts),
            "sources": dict(self.sources),
        }


def scheduler_of(environ: Mapping[str, str]) -> str:
    """Return slurm, kubernetes or plain for ENVIRON."""
    if environ.get("SLURM_JOB_ID"):
        return "slurm"
    pytorchjob = any(environ.get(name) for name in ("PET_RDZV_ENDPOINT", "PET_MASTER_ADDR", "MASTER_ADDR"))
    if environ.get("KUBERNETES_SERVICE_HOST") and pytorchjob:
        return "kubernetes"
    return "plain"


def detect(
    environ: Mapping[str, str] = os.environ,
    *,
    accelerators: Callable[[], tuple[int, str]],
    nproc_per_node: int | None = None,
    rdzv_port: int | None = None,
    job_id: str | None = None,
    scheduler: str | None = None,
    hyperpod_marker: Path = HYPERPOD_MARKER,
) -> LaunchEnvironment:
    """Derive nodes, node rank, rendezvous endpoint and processes per node from ENVIRON."""
    kind = scheduler or scheduler_of(environ)
    if job_id is not None and not _JOB_ID.fullmatch(job_id):
        raise UsageError(f"--job-id: {job_id!r} is not a safe directory name (letters, digits, . _ -)")
    port = _explicit_port(environ, rdzv_port)
    if kind == "slurm":
        facts = _slurm(environ, port, hyperpod_marker)
    elif kind == "kubernetes":
        facts = _kubernetes(environ, port)
    elif kind == "plain":
        facts = _plain(port)
    else:
        raise UsageError(f"unknown scheduler {kind!r} (slurm, kubernetes or plain)")
    sources = facts.pop("sources")
    if job_id is not None:
        facts["job_id"], sources["job_id"] = job_id, "--job-id"
    elif environ.get("KILN_JOB_ID"):
        facts["job_id"], sources["job_id"] = environ["KILN_JOB_ID"], "KILN_JOB_ID"
        if not _JOB_ID.fullmatch(facts["job_id"]):
            raise UsageError(f"KILN_JOB_ID: {facts['job_id']!r} is not a safe directory name (letters, digits, . _ -)")
    elif facts.get("job_id") is None:
        facts["job_id"], sources["job_id"] = generated_job_id(), "generated"
    hint = facts.pop("nproc_hint")
    if nproc_per_node is not None:
        nproc, sources["nproc_per_node"] = nproc_per_node, "--nproc-per-node"
    elif hint is not None:
        nproc, sources["nproc_per_node"] = hint
    else:
        # Asked last: the count of processes this node's GPUs or NeuronCores want, and where it came from.
        wanted, why = accelerators()
        nproc, sources["nproc_per_node"] = (wanted, why) if wanted > 0 else (1, f"one process ({why}: none)")
    return LaunchEnvironment(scheduler=kind, nproc_per_node=nproc, sources=sources, **facts)


def generated_job_id() -> str:
    """Return a fresh job id for a launch no scheduler named."""
    return f"local-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _slurm(environ: Mapping[str, str], port: tuple[int, str] | None, hyperpod_marker: Path) -> dict:
    sources: dict[str, str] = {"job_id": "SLURM_JOB_ID"}
    job_id = environ["SLURM_JOB_ID"]
    list_var = _first_set(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts: tuple[str, ...] = ()
    if list_var:
        try:
            hosts = tuple(expand(environ[list_var]))
        except ValueError as error:
            raise LaunchError(f"{list_var}: {error}") from None
        sources["hosts"] = list_var
    count_var = _first_set(environ, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    if count_var:
        nnodes = _int_var(environ, count_var)
        sources["nnodes"] = count_var
    else:
        nnodes = len(hosts) or 1
        sources["nnodes"] = f"{list_var} length" if hosts else "default"
    if hosts and len(hosts) != nnodes:
        raise LaunchError(f"{count_var} says {nnodes} nodes but {list_var} names {len(hosts)}")
    if "SLURM_NODEID" in environ:
        node_rank = _int_var(environ, "SLURM_NODEID")
        sources["node_rank"] = "SLURM_NODEID"
    elif nnodes == 1:
        node_rank = 0
        sources["node_rank"] = "single node"
    else:
        raise LaunchError(
            "SLURM_NODEID is not set in a multi-node job: start kiln-launch with srun --ntasks-per-node=1"
        )
    tasks = _int_var(environ, "SLURM_STEP_NUM_TASKS") if environ.get("SLURM_STEP_NUM_TASKS") else None
    if tasks is not None and tasks > nnodes:
        raise LaunchError(
            f"srun started {tasks} tasks on {nnodes} nodes; kiln-launch starts the per-GPU processes itself, "
            "so run one task per node (srun --ntasks-per-node=1)"
        )
    if not hosts:
        if nnodes > 1:
            raise LaunchError("no SLURM_JOB_NODELIST in a multi-node job: cannot find the rendezvous host")
        hosts = ("127.0.0.1",)
        sources["hosts"] = "single node: loopback"
    if port is not None:
        rdzv_port, sources["rdzv_port"] = port
    elif environ.get("MASTER_PORT"):
        rdzv_port, sources["rdzv_port"] = _int_var(environ, "MASTER_PORT"), "MASTER_PORT"
    else:
        rdzv_port, sources["rdzv_port"] = _slurm_port(job_id), "derived from SLURM_JOB_ID"
    gpus = environ.get("SLURM_GPUS_ON_NODE", "")
    nproc_hint = (int(gpus), "SLURM_GPUS_ON_NODE") if gpus.isdigit() and int(gpus) > 0 else None
    return {
        "flavor": "hyperpod" if hyperpod_marker.exists() else None,
        "job_id": job_id,
        "nnodes": str(nnodes),
        "node_rank": node_rank,
        "rdzv_endpoint": f"{hosts[0]}:{rdzv_port}",
        "rdzv_is_host": node_rank == 0,
        "hosts": hosts,
        "nproc_hint": nproc_hint,
        "sources": sources,
    }


def _kubernetes(environ: Mapping[str, str], port: tuple[int, str] | None) -> dict:
    sources: dict[str, str] = {}
    job_id, sources["job_id"] = _pytorchjob_name(environ)
    nproc_hint = None
    nproc = environ.get("PET_NPROC_PER_NODE", "")
    # "auto" and "gpu" leave the count to the launcher's own default: one process per GPU or NeuronCore.
    if nproc.isdigit() and int(nproc) > 0:
        nproc_hint = (int(nproc), "PET_NPROC_PER_NODE")
    if environ.get("PET_RDZV_ENDPOINT"):
        nnodes = environ.get("PET_NNODES", "1")
        if not re.fullmatch(r"\d+(:\d+)?", nnodes):
            raise LaunchError(f"PET_NNODES: expected N or MIN:MAX (got {nnodes!r})")
        host, _, given = environ["PET_RDZV_ENDPOINT"].partition(":")
        if port is not None:
            endpoint, sources["rdzv_port"] = f"{host}:{port[0]}", port[1]
        else:
            endpoint, sources["rdzv_port"] = f"{host}:{given or C10D_DEFAULT_PORT}", "PET_RDZV_ENDPOINT"
        node_rank = _int_var(environ, "PET_NODE_RANK") if environ.get("PET_NODE_RANK") else None
        sources.update(nnodes="PET_NNODES", rdzv_endpoint="PET_RDZV_ENDPOINT")
        # Elastic: the rendezvous assigns ranks and torch decides which pod hosts the store.
        return {
            "flavor": "elastic",
            "job_id": job_id,
            "nnodes": nnodes,
            "node_rank": node_rank,
            "rdzv_endpoint": endpoint,
            "rdzv_is_host": None,
            "nproc_hint": nproc_hint,
            "sources": sources,
        }
    addr_var = _first_set(environ, "PET_MASTER_ADDR", "MASTER_ADDR")
    # Old operators set no PET_NNODES; their WORLD_SIZE counted pods, not processes.
    nnodes_var = _first_set(environ, "PET_NNODES", "WORLD_SIZE")
    rank_var = _first_set(environ, "PET_NODE_RANK", "RANK")
    if not (addr_var and nnodes_var and rank_var):
        raise LaunchError("PyTorchJob environment incomplete: need PET_MASTER_ADDR, PET_NNODES and PET_NODE_RANK")
    nnodes = _int_var(environ, nnodes_var)
    node_rank = _int_var(environ, rank_var)
    if not 0 <= node_rank < nnodes:
        raise LaunchError(f"{rank_var}={node_rank} is outside 0..{nnodes - 1} ({nnodes_var}={nnodes})")
    master_port_var = _first_set(environ, "PET_MASTER_PORT", "MASTER_PORT")
    if port is not None:
        rdzv_port, sources["rdzv_port"] = port
    elif master_port_var:
        rdzv_port, sources["rdzv_port"] = _int_var(environ, master_port_var), master_port_var
    else:
        raise LaunchError("PyTorchJob environment incomplete: need PET_MASTER_PORT or MASTER_PORT")
    sources.update(nnodes=nnodes_var, node_rank=rank_var, hosts=addr_var)
    return {
        "flavor": None,
        "job_id": job_id,
        "nnodes": str(nnodes),
        "node_rank": node_rank,
        "rdzv_endpoint": f"{environ[addr_var]}:{rdzv_port}",
        "rdzv_is_host": node_rank == 0,
        "hosts": (environ[addr_var],),
        "nproc_hint": nproc_hint,
        "sources": sources,
    }


def _plain(port: tuple[int, str] | None) -> dict:
    # Port 0 lets the c10d store bind any free port, as torchrun --standalone does.
    rdzv_port, source = port or (0, "any free port")
    return {
        "flavor": None,
        "job_id": None,
        "nnodes": "1",
        "node_rank": 0,
        "rdzv_endpoint": f"127.0.0.1:{rdzv_port}",
        "rdzv_is_host": True,
        "hosts": ("127.0.0.1",),
        "nproc_hint": None,
        "sources": {"rdzv_port": source},
    }


def _pytorchjob_name(environ: Mapping[str, str]) -> tuple[str | None, str]:
    if environ.get("PET_RDZV_ID"):
        return environ["PET_RDZV_ID"], "PET_RDZV_ID"
    # The operator names pods and the master service <job>-master-0 / <job>-worker-N.
    for var in ("PET_MASTER_ADDR", "MASTER_ADDR", "HOSTNAME"):
        value = environ.get(var, "").split(".", 1)[0]
        if _POD_SUFFIX.search(value):
            return _POD_SUFFIX.sub("", value), var
    return None, "generated"


def _slurm_port(job_id: str) -> int:
    number = int(job_id) if job_id.isdigit() else sum(job_id.encode())
    return SLURM_PORT_BASE + number % SLURM_PORT_SPAN


def _explicit_port(environ: Mapping[str, str], flag: int | None) -> tuple[int, str] | None:
    if flag is not None:
        port, source = flag, "--rdzv-port"
    elif environ.get("KILN_RDZV_PORT"):
        port, source = _int_var(environ, "KILN_RDZV_PORT"), "KILN_RDZV_PORT"
    else:
        return None
    if not 1 <= port <= 65535:
        raise UsageError(f"{source}: expected a port in 1..65535 (got {port})")
    return port, source


def _first_set(environ: Mapping[str, str], *names: str) -> str | None:
    return next((name for name in names if environ.get(name)), None)


def _int_var(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{name}: expected an integer (got {value!r})") from None
