"""spec -> BootstrapConfig: what the nodes of a spec's target run. No CDK: the local cluster uses it too."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kiln.bootstrap.adoption import plan_lines
from kiln.bootstrap.budget import (
    boot_work,
    bootstrap_timeout,
    budget_line,
    deadline,
    over_budget,
    parallelcluster_deadline,
    tight_budget,
)
from kiln.bootstrap.checks import BootstrapInputError, check_choice
from kiln.bootstrap.config import (
    ARCHITECTURES,
    TARGETS,
    BootstrapConfig,
    ClusterUser,
    NodeGroup,
    SoftwarePins,
    UserStep,
)
from kiln.bootstrap.local_target import LocalCluster
from kiln.bootstrap.lock import LockError, locked_digests, read_lock
from kiln.bootstrap.profiles import NODE_ROLE_NAMES, PROFILES
from kiln.bootstrap.readiness import BootReadiness, boot_readiness
from kiln.catalog import instance_type
from kiln.catalog.code_server import CODE_SERVER_NODE_UID, CODE_SERVER_NODE_USER, code_server_place
from kiln.catalog.limits import USER_STEP_MAX_BYTES
from kiln.catalog.names import ec2_type_name
from kiln.catalog.neuron import neuron_beta_note
from kiln.catalog.platforms import KILN_INSTALLS, PIN_FIELDS, image_profile
from kiln.contracts.backends import EKS, PARALLELCLUSTER, PCS
from kiln.spec import ClusterSpec, Problem, SpecError, load_spec
from kiln.spec.models import Observability
from kiln.spec.problems import shown


def _architecture(instance_types: tuple[str, ...]) -> str:
    offered = [set(instance_type(name).architectures) for name in instance_types]
    for arch in ARCHITECTURES:
        if all(arch in archs for archs in offered):
            return arch
    raise BootstrapInputError(f"instance types {', '.join(instance_types)}: no one architecture all of them offer")


def config_from_spec(
    spec: ClusterSpec, target: str | None = None, *, local: LocalCluster | None = None
) -> BootstrapConfig:
    """Translate a kiln.spec ClusterSpec into the BootstrapConfig of TARGET (default: its backend)."""
    compute = spec.compute
    # HyperPod nodes orchestrated by EKS are EKS workers: they run the eks target's steps.
    own_target = spec.platform.bootstrap_target.name
    target = target or own_target
    check_choice("target", target, TARGETS)
    profile = PROFILES[target]
    software = spec.software
    common = {
        "locked": spec_lock(spec),
        "user_steps": user_steps(spec, target),
        **code_server_config(spec, target),
        "nccl_env": spec.launcher.environment,
        "checkpoint_dir": spec.launcher.checkpoint_dir,
    }
    if profile.local_cluster:
        if local is None:
            raise BootstrapInputError(
                f"target {target!r}: needs local=LocalCluster(...) (the nodes are not in the spec)"
            )
        exporters = local_exporters(spec.observability)
        return BootstrapConfig(
            target=target,
            os="debian12",
            local=local,
            exporters=exporters,
            prometheus_agent=local_prometheus(spec.observability, exporters),
            **common,
        )
    if target != own_target:
        raise BootstrapInputError(
            f"target: got {target!r} for this {compute.backend!r} spec, allowed: {own_target}, local"
        )
    # Only ParallelCluster and HyperPod with Slurm boot a head node (PCS runs the controller itself), and login
    # nodes run wherever Slurm does: the bundle serves the nodes kiln boots, no others (kiln.spec.rules.service_nodes).
    service: tuple[str, ...] = ()
    if "controller" in spec.platform.roles:
        service = (compute.head_node.instance_type,)
    if "login" in spec.platform.roles and compute.login_nodes.count:
        service += (compute.login_nodes.instance_type,)
    groups = tuple(
        NodeGroup(name=group.name, instance_type=group.instance_type, max_count=max(group.max_count, 1))
        for group in compute.groups
    )
    types = tuple(dict.fromkeys(ec2_type_name(name) for name in (*service, *(g.instance_type for g in groups))))
    exporters = node_exporters(spec, target, types)
    os = spec.image_os
    image = spec.node_image
    pins = installed_pins(spec, image, os)
    return BootstrapConfig(
        target=target,
        # EKS nodes (and HyperPod's EKS nodes) boot an Amazon Linux 2023 image.
        os=os,
        architecture=_architecture(types),
        service_instance_types=service,
        groups=groups,
        image=image,
        replace=tuple(software.replace),
        region=spec.region,
        software=SoftwarePins(
            **pins,
            slurm=spec.slurm_version,
            node_exporter=software.node_exporter,
            prometheus=software.prometheus,
            dcgm_exporter=software.dcgm_exporter,
        ),
        exporters=exporters,
        prometheus_agent=runs_prometheus_agent(spec, target, exporters),
        containers=software.containers,
        # Kubernetes nodes run containerd from the EKS image.
        container_runtime="containerd" if profile.target.uses_kubernetes else "docker",
        lustre=spec.storage.lustre is not None,
        lustre_efa=spec.storage.lustre is not None and spec.storage.lustre.efa,
        **common,
    )


# Components only PCS's nodes run (the spec rules refuse their pins elsewhere).
PCS_ONLY = ("pcs_agent", "pcs_slurm")


def installed_pins(spec: ClusterSpec, image: str, os: str) -> dict[str, str | None]:
    """Return the version kiln installs of each component on SPEC's nodes: none where the IMAGE owns it (adopted),
    else the spec's pin or kiln's own choice (kiln.catalog.platforms.KILN_INSTALLS; Neuron's per instance type,
    ClusterSpec.neuron_release)."""
    owned = image_profile(image).owned_on(os)
    pins: dict[str, str | None] = {}
    for component, field in PIN_FIELDS.items():
        pinned = getattr(spec.software, field)
        if (
            component in PCS_ONLY
            and spec.platform is not PCS
            or component in owned
            and component not in spec.software.replace
        ):
            pins[field] = None
        elif spec.platform is EKS and component == "nccl":
            # EKS pods bring their NCCL; the host has no use for one (the spec rules refuse a pin).
            pins[field] = None
        elif component == "neuron":
            # The pin, else the release that trains (serves) on the spec's Neuron types: kiln.catalog.neuron.
            pins[field] = spec.neuron_release
        else:
            pins[field] = pinned or KILN_INSTALLS.get(component)
    return pins


# The local cluster has no GPUs and no EFA: of the exporters, it runs the node and Slurm ones.
LOCAL_EXPORTERS = ("node", "slurm")


def local_exporters(wanted: Observability | None) -> tuple[str, ...]:
    """Return the exporters the local cluster runs: both it can without a spec, else the ones the spec keeps on."""
    if wanted is None:
        return LOCAL_EXPORTERS
    return tuple(name for name in LOCAL_EXPORTERS if getattr(wanted, f"{name}_exporter") is not False)


def local_prometheus(wanted: Observability | None, exporters: tuple[str, ...]) -> bool:
    """Return whether the local cluster runs Prometheus over its exporters: when the spec asks for a workspace."""
    return bool(wanted is not None and wanted.prometheus and exporters)


def slurm_exporter_node(spec: ClusterSpec, target: str) -> bool:
    """Return whether TARGET has a node beside Slurm's controller for the Slurm exporter and the agent: not without
    Slurm (EKS), and where kiln boots no controller (PCS runs it itself) only with login nodes."""
    profile = PROFILES[target]
    login_nodes = bool(spec.compute.login_nodes.count)
    return profile.target.runs_slurm and (profile.slurm_exporter_role != "login" or login_nodes)


def runs_prometheus_agent(spec: ClusterSpec, target: str, exporters: tuple[str, ...]) -> bool:
    """Return whether TARGET's nodes run the Prometheus agent (Slurm backends; EKS has AMP's collector)."""
    wanted = spec.observability
    return bool(wanted is not None and wanted.prometheus and exporters and slurm_exporter_node(spec, target))


def node_exporters(spec: ClusterSpec, target: str, instance_types: tuple[str, ...]) -> tuple[str, ...]:
    """Return the exporters the bootstrap of TARGET installs for SPEC's nodes (where Kubernetes runs, Helm charts run
    the rest)."""
    wanted = spec.observability
    if wanted is None:
        return ()
    facts = [instance_type(name) for name in instance_types]
    kubernetes = PROFILES[target].target.uses_kubernetes
    exporters = []
    if wanted.node_exporter and not kubernetes:
        exporters.append("node")
    if wanted.slurm_exporter is not False and slurm_exporter_node(spec, target):
        exporters.append("slurm")
    if wanted.dcgm_exporter and not kubernetes and any(f.gpu_count for f in facts):
        exporters.append("dcgm")
    if wanted.efa_exporter and any(f.efa_supported for f in facts):
        exporters.append("efa")
    return tuple(exporters)


# The node role each spec role of a user step names on the local cluster: its login is its controller host, where jobs
# are submitted from (it has no login node of its own).
LOCAL_NODE_ROLES = {**NODE_ROLE_NAMES, "login": "controller"}


def user_steps(spec: ClusterSpec, target: str) -> tuple[UserStep, ...]:
    """Return SPEC's bootstrap.steps as TARGET's nodes run them, each with its script read from the spec's directory
    (the current directory for a spec built in code). A script that cannot be shipped is one problem line each: a
    SpecError naming the spec's file, as `kiln validate` reports the rules' problems."""
    directory = spec._source_dir or Path()
    roles = LOCAL_NODE_ROLES if PROFILES[target].local_cluster else NODE_ROLE_NAMES
    steps, problems = [], []
    for index, step in enumerate(spec.bootstrap.steps):
        script = _user_script(directory, step.path)
        if isinstance(script, str):
            problems.append(Problem(path=("bootstrap", "steps", index, "path"), message=script))
            continue
        steps.append(
            UserStep(
                name=step.name,
                phase=step.phase,
                roles=tuple(dict.fromkeys(roles[role] for role in step.roles)),
                script=script,
                sha256=hashlib.sha256(script).hexdigest(),
            )
        )
    if problems:
        raise SpecError(spec._source_file or "<spec>", problems, spec._source_lines)
    return tuple(steps)


def _user_script(directory: Path, relative: str) -> bytes | str:
    """Return the bytes of the script at RELATIVE below DIRECTORY, or why it cannot be shipped (one line): missing,
    resolving outside DIRECTORY (symlinks followed), no regular file, over USER_STEP_MAX_BYTES, or no '#!' line."""
    got = f"got {shown(relative)}"
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        return f"{got}: must be a path below the spec's directory, without '..'"
    base = directory.resolve()
    try:
        resolved = (directory / relative).resolve(strict=True)
    except FileNotFoundError:
        return f"{got}: no such file in the spec's directory {base}"
    except (OSError, RuntimeError) as error:  # a symlink loop; permissions
        return f"{got}: cannot be resolved ({error.strerror if isinstance(error, OSError) else error})"
    if not resolved.is_relative_to(base):
        return (
            f"{got}: resolves to {resolved}, outside the spec's directory {base} (symlinks are followed); copy the "
            "script into it"
        )
    try:
        # Never blocks on a pipe, and reads what was checked: the open file itself is held to the rules.
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        return f"{got}: cannot be read ({error.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{got}: is not a regular file (a directory, pipe or device); name a script"
        if info.st_size > USER_STEP_MAX_BYTES:
            return f"{got}: is {info.st_size} bytes, allowed: at most {USER_STEP_MAX_BYTES} (256 KiB)"
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(USER_STEP_MAX_BYTES + 1)
    except OSError as error:
        return f"{got}: cannot be read ({error.strerror})"
    finally:
        os.close(fd)
    if len(data) > USER_STEP_MAX_BYTES:
        return f"{got}: is over {USER_STEP_MAX_BYTES} bytes (256 KiB), allowed: at most that"
    if not data.startswith(b"#!"):
        return f"{got}: does not start with '#!' (an interpreter line such as #!/bin/bash): nodes run it as a program"
    return data


def code_server_config(spec: ClusterSpec, target: str) -> dict[str, Any]:
    """Return BootstrapConfig's code-server settings for SPEC's TARGET nodes: the role of the node it runs on and its
    user (code_server.user, else kiln's own user, whom every node creates: users; locally, whoever ran kiln:
    local_code_server_user), or none where it is off, where Kubernetes runs it (a pod, not a node's bootstrap), or
    nowhere to run (PCS without login nodes: the spec rules refuse that)."""
    wanted = spec.code_server
    profile = PROFILES[target]
    if wanted is None or profile.target.uses_kubernetes:
        return {}
    if profile.local_cluster:
        return {"code_server_role": "controller", "code_server_user": local_code_server_user()}
    platform = spec.platform
    place = code_server_place(
        kubernetes=platform.uses_kubernetes,
        controller="controller" in platform.roles,
        login_nodes=spec.compute.login_nodes.count,
    )
    if place not in ("login", "controller"):
        return {}
    if wanted.user:
        return {"code_server_role": place, "code_server_user": wanted.user}
    # kiln's own user, on every node with the same uid (configure_users): the jobs its terminal submits run as it.
    user = ClusterUser(name=CODE_SERVER_NODE_USER, uid=CODE_SERVER_NODE_UID)
    return {"code_server_role": place, "code_server_user": user.name, "users": (user,)}


def local_code_server_user(environ: Mapping[str, str] | None = None, euid: int | None = None) -> str:
    """Return whom the local cluster runs code-server as: the user who ran kiln through sudo (SUDO_USER, when that
    is a user of this machine other than root), else the user running kiln, root included (kiln local runs as root)."""
    environ = os.environ if environ is None else environ
    sudo_user = environ.get("SUDO_USER", "")
    if sudo_user and sudo_user != "root":
        try:
            return pwd.getpwnam(sudo_user).pw_name
        except KeyError:
            pass
    return pwd.getpwuid(os.geteuid() if euid is None else euid).pw_name


def spec_lock(spec: ClusterSpec) -> dict[str, str]:
    """Return URL -> sha256 from the spec's lock file; none when it names none or the file is not written yet."""
    path = spec.lock_path
    if path is None or not path.exists():
        return {}
    return locked_digests(read_lock(path))


def lock_remedy(spec: ClusterSpec, path: str) -> str:
    """Return the one step that makes the downloads of the spec at PATH verifiable."""
    command = f"run `kiln bootstrap lock --spec {path}` on a machine with internet"
    if spec.lock_path is None:
        return f"add lock_file: {Path(path).stem}.lock.json under software, then {command}"
    return f"{command} (it writes {spec.lock_path})"


def node_kinds(spec: ClusterSpec) -> dict[str, str]:
    """Return each kind of node SPEC's backend boots with kiln's bootstrap -> its instance type, in spec order."""
    compute, roles = spec.compute, spec.platform.roles
    kinds = {}
    # PCS runs the controller itself, and EKS has no Slurm head node.
    if "controller" in roles:
        kinds["head node"] = compute.head_node.instance_type
    if "login" in roles and compute.login_nodes.count:
        kinds["login"] = compute.login_nodes.instance_type
    for group in compute.groups:
        kinds[group.name] = group.instance_type
    return {kind: ec2_type_name(name) for kind, name in kinds.items()}


def node_architecture(spec: ClusterSpec) -> str:
    """Return the one architecture every node SPEC boots offers (x86_64 or arm64)."""
    return _architecture(tuple(dict.fromkeys(node_kinds(spec).values())))


# The bootstrap role of each kind of node node_kinds names; every other kind is a compute group's (worker).
KIND_ROLES = {"head node": "controller", "login": "login"}


def boot_budget(spec: ClusterSpec, config: BootstrapConfig) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Return SPEC's boot budget (kiln.bootstrap.budget): one line per kind of node, one refusal per compute group
    that scales from zero and whose setup cannot fit its platform's fixed deadline, and one warning per other compute
    group whose setup leaves less than the boot margin of its deadline (PCS gives every node it launches, static or
    not, about 30 minutes to join Slurm)."""
    baked = spec.compute.image.bake
    from_zero = {group.name for group in spec.compute.groups if group.min_count == 0}
    lines, refusals, warnings = [], [], []
    for kind, name in node_kinds(spec).items():
        role = KIND_ROLES.get(kind, "worker")
        limit = deadline(config.target, role)
        # ParallelCluster's head and login nodes boot ami_id, not the bake (an update never changes their image).
        work = boot_work(
            config, name, baked=baked and (role == "worker" or spec.platform is not PARALLELCLUSTER), role=role
        )
        lines.append(budget_line(kind, work, limit))
        if role != "worker":
            continue
        on_bake = boot_work(config, name, baked=True, role=role)
        refusal = over_budget(kind, work, limit, baked=on_bake) if kind in from_zero else None
        warning = None if refusal else tight_budget(kind, work, limit, baked=on_bake)
        refusals.extend([refusal] if refusal else [])
        warnings.extend([warning] if warning else [])
    return tuple(lines), tuple(refusals), tuple(warnings)


def eks_node_provision_seconds(spec: ClusterSpec, config: BootstrapConfig, default_seconds: int) -> int:
    """Return how long the autoscaler lets a new EKS node take to become ready: DEFAULT_SECONDS (its own), or kiln's
    estimate of the slowest group's setup with headroom where that is longer."""
    baked = spec.compute.image.bake
    slowest = max(
        (boot_work(config, ec2_type_name(g.instance_type), baked=baked) for g in spec.compute.groups),
        key=lambda work: work.seconds,
    )
    return bootstrap_timeout(slowest, default_seconds)


def parallelcluster_timeouts(spec: ClusterSpec, config: BootstrapConfig) -> dict[str, int]:
    """Return ParallelCluster's DevSettings/Timeouts for SPEC: each the platform's default, or kiln's estimate of
    the head node's (or the slowest compute group's) setup with headroom where that is longer."""
    baked = spec.compute.image.bake
    head = parallelcluster_deadline("controller")
    compute = parallelcluster_deadline("worker")
    slowest = max(
        (boot_work(config, ec2_type_name(g.instance_type), baked=baked) for g in spec.compute.groups),
        key=lambda work: work.seconds,
    )
    # The head node boots compute.image.ami_id, never the bake (kiln.stacks.parallelcluster): it installs at boot.
    head_work = boot_work(config, ec2_type_name(spec.compute.head_node.instance_type), baked=False, role="controller")
    return {
        head.name: bootstrap_timeout(head_work, head.seconds),
        compute.name: bootstrap_timeout(slowest, compute.seconds),
    }


def neuron_beta_warnings(spec: ClusterSpec) -> tuple[str, ...]:
    """Return one warning per group type whose work (training on Trainium, inference on Inferentia) the spec's Neuron
    release does only in a beta: valid (a pin opts in), but not what Neuron supports generally."""
    version = spec.neuron_release
    if version is None:
        return ()
    types = dict.fromkeys(group.instance_type for group in spec.compute.groups)
    return tuple(note for name in types if (note := neuron_beta_note(version, name)))


def load_and_judge(path: str) -> tuple[ClusterSpec, BootReadiness]:
    """Load the spec at PATH and judge its nodes (downloads they could not verify, setups that cannot fit their
    platform's deadline, what they adopt and install); every failure is a SpecError naming the file."""
    spec = load_spec(path)
    try:
        config = config_from_spec(spec)
        readiness = boot_readiness(config, remedy=lock_remedy(spec, path))
        budget, refusals, warnings = boot_budget(spec, config)
        kinds = node_kinds(spec)
        nodes = plan_lines(config, kinds, {kind: KIND_ROLES.get(kind, "worker") for kind in kinds})
        return spec, dataclasses.replace(
            readiness,
            nodes=nodes,
            budget=budget,
            over_budget=refusals,
            tight_budget=warnings,
            beta=neuron_beta_warnings(spec),
        )
    except LockError as exc:
        raise SpecError(str(path), [Problem(path=("software", "lock_file"), message=str(exc))]) from None
    except SpecError:
        # Already its lines (a script of bootstrap.steps that cannot be shipped).
        raise
    except ValueError as exc:
        problem = Problem(path=("compute",), message=f"the node bootstrap cannot be built: {exc}")
        raise SpecError(str(path), [problem]) from None
