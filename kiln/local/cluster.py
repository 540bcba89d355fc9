"""Bring the local cluster up (or heal it), report it, and take it down leaving nothing behind."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kiln.host.safe_output import UnsafeOutput, claim_directory, remove_owned_directory
from kiln.local import code_server as local_code_server
from kiln.local import daemons, network, preflight, procs, provision, replacer, slurm
from kiln.local import state as state_file
from kiln.local.errors import LocalError, LocalFailure
from kiln.local.exporters import exporter_processes, prepare, scrape
from kiln.local.layout import DEFAULT_SUBNET, DEFAULT_TAG, PREFIX_ENV, ClusterLayout, default_prefix, plan_layout
from kiln.local.progress import Progress, table
from kiln.local.state import ClusterState, ProcessRecord
from kiln.local.torchlink import link_torch, missing_companions
from kiln.node_config.code_server import local_code_server_user
from kiln.node_config.exporters import local_exporters, local_prometheus

DEFAULT_NODES = 2
DEFAULT_SLURMCTLD_PORT = 6817
DEFAULT_SLURMD_PORT = 6818
READY_TIMEOUT_S = 90.0
# The reason a node carries while `replace_node` replaces it (kiln's prefix: the replacer's own doing).
REPLACING_REASON = "kiln-local: replacing the node"


@dataclass(frozen=True, kw_only=True)
class UpOptions:
    """What `up` was asked for; None means the default for a new cluster, or whatever a running one has."""

    prefix: str
    nodes: int | None = None
    spec: str | None = None
    tag: str | None = None
    subnet: str | None = None
    slurmctld_port: int | None = None
    slurmd_port: int | None = None
    timeout_s: float = READY_TIMEOUT_S


def _checks_for_root() -> None:
    preflight.check_platform()
    preflight.check_root()


def load_cluster(prefix: Path) -> ClusterState:
    """Return the cluster recorded under PREFIX; raise when none is up there."""
    found = state_file.load(prefix) if prefix.is_dir() else None
    if found is None:
        raise LocalError(
            f"no kiln local cluster is up under {prefix}: run `kiln local up` first, or name the prefix "
            f"it was brought up with (--prefix, or ${PREFIX_ENV})"
        )
    return found


def _conflicts(options: UpOptions, layout: ClusterLayout) -> list[str]:
    spec = os.path.abspath(options.spec) if options.spec else None
    wanted = {
        "--nodes": (options.nodes, len(layout.nodes)),
        "--spec": (spec, layout.spec),
        "--tag": (options.tag, layout.tag),
        "--subnet": (options.subnet, layout.subnet),
        "--slurmctld-port": (options.slurmctld_port, layout.slurmctld_port),
        "--slurmd-port": (options.slurmd_port, layout.slurmd_port),
    }
    return [f"{flag} {asked} (it has {has})" for flag, (asked, has) in wanted.items() if asked not in (None, has)]


def _plan(options: UpOptions, prefix: Path) -> ClusterLayout:
    cluster_name = "kiln-local"
    spec = os.path.abspath(options.spec) if options.spec else None
    observability = None
    code_server_user = ""
    replace_nodes = auto_resume = True
    if spec:
        loaded = provision.load_spec_file(spec)
        cluster_name, observability = loaded.name, loaded.observability
        replace_nodes = loaded.resilience.node_recovery == "automatic"
        auto_resume = loaded.resilience.auto_resume
        # Locally code-server runs as whoever brought the cluster up (not the spec's code_server.user, a user of the
        # cluster's nodes): the user behind sudo, else the one running kiln, root included.
        code_server_user = local_code_server_user() if loaded.code_server is not None else ""
    return plan_layout(
        prefix=str(prefix),
        nodes=options.nodes or DEFAULT_NODES,
        tag=options.tag or DEFAULT_TAG,
        subnet=options.subnet or DEFAULT_SUBNET,
        slurmctld_port=options.slurmctld_port or DEFAULT_SLURMCTLD_PORT,
        slurmd_port=options.slurmd_port or DEFAULT_SLURMD_PORT,
        cluster_name=cluster_name,
        spec=spec,
        exporters=local_exporters(observability),
        prometheus=local_prometheus(observability, local_exporters(observability)),
        code_server_user=code_server_user,
        replace_nodes=replace_nodes,
        auto_resume=auto_resume,
    )


def network_problems(current: ClusterState) -> list[str]:
    """Return what is missing from the cluster's network."""
    layout = current.layout
    missing = [] if network.link_exists(layout.bridge) else [f"bridge {layout.bridge}"]
    for node in layout.nodes:
        if not network.netns_exists(node):
            missing.append(f"namespace {node.netns}")
        if not network.link_exists(node.veth):
            missing.append(f"veth {node.veth}")
    return missing


def _roles(layout: ClusterLayout) -> list[str]:
    exporters = [exporter.role for exporter in exporter_processes(layout)]
    editor = [f"{local_code_server.ROLE_PREFIX}:{layout.nodes[0].name}"] if layout.code_server_user else []
    slurmds = (daemons.slurmd_role(node) for node in layout.nodes)
    replacing = [replacer.ROLE] if layout.replace_nodes else []
    return [daemons.MUNGED, daemons.SLURMCTLD, *slurmds, *exporters, *editor, *replacing]


def stopped_roles(current: ClusterState) -> list[str]:
    """Return the daemons that should run but do not."""
    stopped = []
    for role in _roles(current.layout):
        record = current.process(role)
        if record is None or not procs.is_running(record):
            stopped.append(role)
    return stopped


def problems(current: ClusterState) -> list[str]:
    """Return everything that keeps the cluster from being up as recorded."""
    found = [] if current.bootstrapped else ["bootstrap not finished"]
    found += [f"{name} missing" for name in network_problems(current)]
    found += [f"{role} not running" for role in stopped_roles(current)]
    return found


class _Up:
    """One run of `up`: converge the recorded cluster to running, saving state before each change."""

    def __init__(self, current: ClusterState, progress: Progress) -> None:
        self.state = current
        self.layout = current.layout
        self.progress = progress
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "KILN_"))}

    def save(self, **changes) -> None:
        self.state = dataclasses.replace(self.state, **changes)
        state_file.save(self.state)

    def record(self, record: ProcessRecord) -> None:
        self.state = self.state.with_process(record)
        state_file.save(self.state)

    def run(self, timeout_s: float) -> None:
        if not self.state.bootstrapped:
            self.bootstrap()
        if network_problems(self.state):
            self.network()
        self.start_stopped()
        count = len(self.layout.nodes)
        with self.progress.phase(f"wait until {'the node is' if count == 1 else f'the {count} nodes are'} idle"):
            slurm.wait_ready(self.layout, timeout_s, alive=self.check_alive)
        if self.layout.replace_nodes and replacer.ROLE in stopped_roles(self.state):
            self.node_replacer()

    def start_stopped(self) -> None:
        """Start every daemon but the node replacer that should run and does not."""
        stopped = stopped_roles(self.state)
        if daemons.MUNGED in stopped:
            self.munged()
        if daemons.SLURMCTLD in stopped:
            self.slurmctld()
        nodes = [node for node in self.layout.nodes if daemons.slurmd_role(node) in stopped]
        if nodes:
            self.slurmds(nodes)
        exporters = [exporter for exporter in exporter_processes(self.layout) if exporter.role in stopped]
        if exporters:
            self.exporters(exporters)
        server = local_code_server.code_server_process(self.layout)
        if server is not None and server.role in stopped:
            self.code_server(server)

    def bootstrap(self) -> None:
        with self.progress.phase("render the `local` bootstrap bundle"):
            entry = provision.render(self.layout)
        provision.run_bootstrap(entry, self.layout, self.progress)
        with self.progress.phase("share this machine's torch with the launcher venv"):
            source = link_torch(self.layout.venv, self.layout.path("/opt/kiln/torch"))
        if source is None:
            self.progress.note("no torch here: `kiln local smoke` needs kiln's launcher extra")
        elif missing := missing_companions():
            self.progress.note(
                f"no {' or '.join(missing)} here: torch warns at every import in a job; install kiln's launcher extra"
            )
        self.save(bootstrapped=True)

    def network(self) -> None:
        layout = self.layout
        count = len(layout.nodes)
        with self.progress.phase(f"create bridge {layout.bridge} and {count} node namespace{'s' * (count > 1)}"):
            # Recorded before creation, so `down` finds them even if this run dies halfway.
            self.save(
                bridge=layout.bridge,
                namespaces=tuple(node.netns for node in layout.nodes),
                veths=tuple(node.veth for node in layout.nodes),
            )
            network.create_bridge(layout)
            for node in layout.nodes:
                network.create_node(layout, node)
            network.write_hosts(layout)

    def munged(self) -> None:
        argv = daemons.munged_argv(self.layout)
        log = daemons.log_path(self.layout, daemons.MUNGED)
        with self.progress.phase("start munged"):
            socket_path = self.layout.munge_socket
            if socket_path.exists():
                socket_path.unlink()
            record, _ = procs.start(daemons.MUNGED, argv, argv, log, self.env)
            self.record(record)
            daemons.wait_until(socket_path.exists, lambda: procs.is_running(record), "munged", log)

    def slurmctld(self) -> None:
        layout = self.layout
        argv = daemons.slurmctld_argv(layout)
        log = daemons.log_path(layout, daemons.SLURMCTLD)
        with self.progress.phase(f"start slurmctld on {layout.controller_address}:{layout.slurmctld_port}"):
            record, _ = procs.start(daemons.SLURMCTLD, argv, argv, log, self.env)
            self.record(record)
            daemons.wait_until(
                lambda: daemons.accepts_connections(layout.controller_address, layout.slurmctld_port),
                lambda: procs.is_running(record),
                "slurmctld",
                log,
            )

    def slurmds(self, nodes) -> None:
        # A node's boot: the user's steps for compute nodes first, then slurmd (a node whose steps fail never joins).
        steps = provision.node_steps(self.layout)
        for node in nodes if steps else ():
            provision.run_node_steps(self.layout, node, steps, self.progress)
        names = ", ".join(node.name for node in nodes)
        with self.progress.phase(f"start slurmd on {names}"):
            for node in nodes:
                role = daemons.slurmd_role(node)
                record, _ = procs.start(
                    role,
                    daemons.slurmd_launch(self.layout, node),
                    daemons.slurmd_argv(self.layout, node),
                    daemons.log_path(self.layout, role),
                    self.env,
                )
                self.record(record)

    def exporters(self, exporters) -> None:
        kinds = ", ".join(dict.fromkeys(exporter.kind for exporter in exporters))
        with self.progress.phase(f"start {len(exporters)} exporter{'s' * (len(exporters) > 1)} ({kinds})"):
            for exporter in exporters:
                log = daemons.log_path(self.layout, exporter.role)
                env = slurm.client_env(self.layout, self.env) if exporter.kind == "slurm" else self.env
                prepare(exporter, slurm.client_env(self.layout, self.env))
                record, _ = procs.start(exporter.role, list(exporter.launch), list(exporter.argv), log, env)
                self.record(record)
                daemons.wait_until(
                    lambda exporter=exporter: daemons.accepts_connections(exporter.address, exporter.port),
                    lambda record=record: procs.is_running(record),
                    exporter.role,
                    log,
                )

    def code_server(self, server: local_code_server.LocalCodeServer) -> None:
        log = daemons.log_path(self.layout, server.role)
        with self.progress.phase(f"start code-server on {server.node.name} as {server.user}"):
            local_code_server.prepare(server, self.layout.tmp_dir)
            record, _ = procs.start(server.role, list(server.launch), list(server.argv), log, server.env)
            self.record(record)
            local_code_server.wait_listening(server, record.pid, lambda: procs.is_running(record), log)
            status = local_code_server.login_status(server)
            if status != 200:
                raise LocalFailure(f"{server.role}: its login page answers {status or 'nothing'} (log: {log})")

    def node_replacer(self) -> None:
        # Started once the nodes are idle, so it never mistakes a node still coming up for a lost one.
        argv = replacer.argv(self.layout.prefix)
        log = daemons.log_path(self.layout, replacer.ROLE)
        with self.progress.phase("start the node replacer"):
            record, _ = procs.start(replacer.ROLE, argv, argv, log, self.env)
            self.record(record)

    def check_alive(self) -> None:
        for role in _roles(self.layout):
            if role == replacer.ROLE:
                # Started (again) only once the nodes are idle.
                continue
            record = self.state.process(role)
            if record is not None and not procs.is_running(record):
                detail = procs.log_tail(record.log)
                raise LocalFailure(f"{role} exited" + (f": {detail}" if detail else "") + f" (log: {record.log})")


def replace_node(prefix: Path, name: str, out: TextIO, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Replace node NAME as a platform replaces an unhealthy instance (kiln.local.replacer): stop everything in its
    network namespace, create the namespace again, start its daemons afresh, and return it to service."""
    with state_file.locked(prefix):
        current = load_cluster(prefix)
        layout = current.layout
        node = layout.node(name)
        # DOWN first, so that no job (a requeued one above all) is started on the node while its daemons are gone or
        # not yet registered; ReturnToService=2 returns it once its new slurmd registers, as a platform's new
        # instance joins.
        down = ["scontrol", "update", f"NodeName={name}", "State=DOWN", f"Reason={REPLACING_REASON}"]
        slurm.client(layout, *down)
        slurmd = current.process(daemons.slurmd_role(node))
        pids = set(procs.pids_in_netns(node.netns_path))
        if slurmd is not None and procs.is_running(slurmd):
            pids.add(slurmd.pid)
        procs.stop_pids(sorted(pids))
        # Again now that the old slurmd is gone: a ping it answered meanwhile may have taken the node back.
        slurm.client(layout, *down)
        network.remove(None, (node.veth,), (node.netns,))
        converge = _Up(current, Progress(out))
        converge.network()
        converge.start_stopped()
        slurm.wait_registered(layout, name, timeout_s, alive=converge.check_alive)
        # A drain kiln set outlives slurmd; the fresh node starts clean.
        found = slurm.node_statuses(layout).get(name)
        if found is not None and not found.ready:
            slurm.client(layout, "scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
        slurm.wait_ready(layout, timeout_s, alive=converge.check_alive)


def node_rows(layout: ClusterLayout, statuses: dict[str, slurm.NodeStatus]) -> tuple[list[str], list[list[str]]]:
    """Return the node table: name, address, Slurm state, CPUs, memory (and the reason, when any node has one)."""
    header = ["NODE", "ADDRESS", "STATE", "CPUS", "MEMORY"]
    rows = []
    for node in layout.nodes:
        found = statuses.get(node.name)
        state = found.state if found else "unknown"
        cpus = found.cpus if found else str(node.cpus)
        memory = f"{found.memory_mib if found else node.memory_mib} MiB"
        rows.append([node.name, node.address, state, cpus, memory, found.reason if found else "not in sinfo"])
    if any(row[-1] for row in rows):
        header.append("REASON")
    else:
        rows = [row[:-1] for row in rows]
    return header, rows


def up(options: UpOptions, out: TextIO = sys.stdout) -> int:
    """Bring the cluster up, or heal a recorded one; print progress and the node table."""
    _checks_for_root()
    preflight.check_tools()
    preflight.check_netns()
    prefix = Path(os.path.abspath(options.prefix))
    existing = state_file.load(prefix) if prefix.is_dir() else None
    if existing is not None:
        conflicts = _conflicts(options, existing.layout)
        if conflicts:
            raise LocalError(
                f"a cluster is already up under {prefix} with other settings ({'; '.join(conflicts)}): "
                "`kiln local down` it first, or use another --prefix"
            )
        layout = existing.layout
    else:
        preflight.check_prefix(prefix)
        layout = _plan(options, prefix)
        preflight.check_names_free(layout)
        preflight.check_subnet(layout)
        # A bad spec fails here, before anything exists.
        provision.bootstrap_config(layout)
    current = existing or ClusterState(layout=layout)
    if existing is not None and not problems(existing):
        print(f"kiln local: the cluster under {prefix} is already up; nothing changed", file=out)
        print_nodes(layout, out)
        return 0
    if daemons.SLURMCTLD in stopped_roles(current):
        preflight.check_port(layout.slurmctld_port)
    if existing is None:
        _claim(prefix)
    with state_file.locked(prefix):
        if existing is None:
            state_file.save(current)
            print(f"kiln local up: {len(layout.nodes)} nodes under {prefix}", file=out)
        else:
            print(f"kiln local up: healing the cluster under {prefix} ({'; '.join(problems(existing))})", file=out)
        progress = Progress(out)
        try:
            _Up(current, progress).run(options.timeout_s)
        except (LocalError, LocalFailure) as error:
            progress.end("failed")
            raise type(error)(
                f"{error}; fix it and run `kiln local up` again, or `kiln local down` to remove what exists"
            ) from None
        print(f"cluster up in {progress.elapsed:.1f}s", file=out)
    print_nodes(layout, out)
    for exporter in exporter_processes(layout):
        print(f"metrics: {exporter.title} on {exporter.where}: {exporter.url}", file=out)
    server = local_code_server.code_server_process(layout)
    if server is not None:
        print(f"code-server: {server.where}, as {server.user}; password in {server.config}", file=out)
    print(
        "next: kiln local run -- hostname | kiln local smoke | kiln local down"
        + ("" if prefix == Path(os.path.abspath(default_prefix())) else f"  (with --prefix {prefix})"),
        file=out,
    )
    return 0


def _claim(prefix: Path) -> None:
    """Make PREFIX kiln's own (marked), so `down` may later remove it and nothing else."""
    try:
        claim_directory(prefix, what="kiln local up")
    except UnsafeOutput as error:
        raise LocalError(str(error)) from None


def print_nodes(layout: ClusterLayout, out: TextIO) -> None:
    header, rows = node_rows(layout, slurm.node_statuses(layout))
    print(table(header, rows), file=out)


def status(prefix: str, out: TextIO = sys.stdout) -> int:
    """Print daemons, nodes and jobs; return 0 when healthy, 1 when something is down."""
    preflight.check_platform()
    current = load_cluster(Path(os.path.abspath(prefix)))
    layout = current.layout
    print(
        f"kiln local cluster {layout.cluster_name} under {layout.prefix}: {len(layout.nodes)} nodes, "
        f"slurmctld {layout.controller_address}:{layout.slurmctld_port}, bridge {layout.bridge}",
        file=out,
    )
    rows = []
    for role in _roles(layout):
        record = current.process(role)
        running = record is not None and procs.is_running(record)
        rows.append([role, str(record.pid) if record else "-", "running" if running else "NOT RUNNING"])
    print(table(["DAEMON", "PID", "STATE"], rows), file=out)
    found = problems(current)
    if daemons.SLURMCTLD not in stopped_roles(current):
        statuses = slurm.node_statuses(layout)
        header, node_table = node_rows(layout, statuses)
        print(table(header, node_table), file=out)
        found += [
            f"node {s.name} is {s.state}" + (f" ({s.reason})" if s.reason else "")
            for s in statuses.values()
            if not s.ready
        ]
        jobs = slurm.client(layout, "squeue", "-h", "-o", "%i %T").stdout.split("\n")
        jobs = [line for line in jobs if line.strip()]
        print(f"jobs: {len(jobs)} in the queue", file=out)
    endpoints = exporter_processes(layout)
    if endpoints:
        rows = []
        for exporter in endpoints:
            answers = scrape(exporter.url) is not None
            rows.append([exporter.kind, exporter.where, exporter.url, "answering" if answers else "NOT ANSWERING"])
            if not answers:
                found.append(f"{exporter.role} does not answer at {exporter.url}")
        print(table(["EXPORTER", "ON", "ENDPOINT", "STATE"], rows), file=out)
    server = local_code_server.code_server_process(layout)
    record = current.process(server.role) if server is not None else None
    if server is not None:
        # Where it listens, read from the kernel's view of node 1's namespace (no root needed to read it).
        listens = record is not None and procs.is_running(record) and local_code_server.is_listening(record.pid)
        state = "listening" if listens else "NOT LISTENING"
        print(f"code-server: {server.where}, as {server.user}: {state}; password in {server.config}", file=out)
        if not listens:
            found.append(f"{server.role} does not listen on {server.url}")
    if found:
        print(f"unhealthy: {'; '.join(found)}; `kiln local up` heals it", file=out)
        return 1
    print("healthy", file=out)
    return 0


def down(prefix: str, out: TextIO = sys.stdout) -> int:
    """Stop what `up` started, remove the namespaces, bridge and prefix; nothing is left behind."""
    _checks_for_root()
    prefix_path = Path(os.path.abspath(prefix))
    load_cluster(prefix_path)
    progress = Progress(out)
    print(f"kiln local down: {prefix_path}", file=out)
    with state_file.locked(prefix_path):
        # Read again under the lock: an `up` may have recorded more while we waited.
        current = load_cluster(prefix_path)
        layout = current.layout
        # The replacer first: it must not see the nodes go and bring them back.
        watching = [r for r in current.processes if r.role == replacer.ROLE and procs.is_running(r)]
        if watching:
            with progress.phase("stop the node replacer"):
                procs.stop_records(watching)
        slurmds = {r.pid for r in current.processes if r.role.startswith("slurmd:") and procs.is_running(r)}
        # Every process in a namespace this cluster created is the cluster's: slurmd and the
        # slurmstepd and job processes it started, which outlive a killed slurmd.
        inside = {
            pid
            for node in layout.nodes
            if node.netns in current.namespaces
            for pid in procs.pids_in_netns(node.netns_path)
        }
        if slurmds | inside:
            with progress.phase(f"stop slurmd and job processes on the nodes ({len(slurmds | inside)})"):
                procs.stop_pids(sorted(slurmds | inside))
        daemons_left = [r for r in current.processes if not r.role.startswith("slurmd:") and r.role != replacer.ROLE]
        controllers = [r for r in daemons_left if procs.is_running(r)]
        if controllers:
            with progress.phase(f"stop {' and '.join(r.role for r in controllers)}"):
                procs.stop_records(controllers)
        if current.bridge or current.namespaces or current.veths:
            count = len(current.namespaces)
            with progress.phase(f"remove bridge {current.bridge}, {count} namespace{'s' * (count != 1)} and veths"):
                network.remove(current.bridge, current.veths, current.namespaces)
        with progress.phase(f"remove {prefix_path}"):
            try:
                remove_owned_directory(prefix_path, what="kiln local down")
            except UnsafeOutput as error:
                raise LocalError(f"{error}; the cluster is stopped, remove what is left by hand") from None
    print(f"cluster down in {progress.elapsed:.1f}s; nothing left behind", file=out)
    return 0
