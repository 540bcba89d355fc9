"""The boot budget: how long kiln's steps keep a fresh node busy before it can run a job, against how long its
platform waits for it.

A node that scales from zero must finish its setup before its platform gives up on it: ParallelCluster's bootstrap
timeouts (settable, so kiln sets them from the estimate) and PCS's Slurm ResumeTimeout (fixed, so a node whose
setup cannot fit must boot a baked image instead). The estimate adds up each step's `seconds` (kiln.bootstrap.steps)
for what the step does on that node: install, verify the image's copy (adopt), find it baked, or nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kiln.bootstrap.adoption import component_plan, needed
from kiln.bootstrap.config import BootstrapConfig, UserStep
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.steps import STEPS, Step
from kiln.catalog import InstanceType, instance_type
from kiln.catalog.platforms import service_fact

# kiln's estimates (not AWS figures): verifying an image's copy of a component (a version read, the loaded
# driver's nvidia-smi), comparing a baked step's marker, and the instance's own boot with its platform's setup
# (cloud-init, the platform's agent or cookbook) before kiln's first step.
ADOPT_SECONDS = 15
BAKED_SECONDS = 2
PLATFORM_SECONDS = 300
# The user's own steps (spec bootstrap.steps): kiln cannot know what a script does, so it counts each install step at 2
# minutes and each configure step at 30 seconds where it runs (a baked install step: a marker compare). These are
# placeholders, not estimates of any script: correct them with a node's step log (`done in Ns` per step), and where a
# script takes longer, bake it (an install step) or move its work off the node's boot.
USER_INSTALL_SECONDS = 120
USER_CONFIGURE_SECONDS = 30
# How far ParallelCluster's timeouts stretch beyond the estimate: a timeout that strikes kills a node that was
# still working, and a long one only waits longer for a node that hung.
TIMEOUT_HEADROOM = 1.5
# ParallelCluster's timeouts are set in whole minutes of this many.
TIMEOUT_STEP_SECONDS = 300
# The share of a platform's deadline a node's estimated setup must leave free. kiln's step figures are estimates, and a
# real boot varies with what they cannot see: the package mirrors' and download hosts' speed, the instance's own boot
# (a GPU or Trainium instance initialises its accelerators and EFA devices before cloud-init), and a first launch into
# a capacity block. A setup that fits but leaves less than this (6 of PCS's 30 minutes) may still miss the deadline on
# a slow day: `kiln validate` warns and recommends a bake; past the deadline it refuses (over_budget). Where kiln sets
# the deadline itself (ParallelCluster's timeouts, TIMEOUT_HEADROOM) the setup always leaves a third of it.
BOOT_MARGIN = 0.2


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What one step does on one kind of node at boot, and kiln's estimate of how long it takes."""

    step: str
    work: str  # install, adopt, baked, run (a configure step) or skip
    seconds: int


@dataclass(frozen=True, kw_only=True)
class BootWork:
    """kiln's estimate of one kind of node's setup at boot: each step's work, with the platform's own before it."""

    instance_type: str
    steps: tuple[StepWork, ...]

    @property
    def seconds(self) -> int:
        return PLATFORM_SECONDS + sum(step.seconds for step in self.steps)

    @property
    def minutes(self) -> int:
        return math.ceil(self.seconds / 60)

    def heaviest(self, count: int = 3) -> tuple[StepWork, ...]:
        """Return up to COUNT steps of a minute or more, longest first."""
        long = (step for step in self.steps if step.seconds >= 60)
        return tuple(sorted(long, key=lambda s: -s.seconds)[:count])


def _install_work(config: BootstrapConfig, facts: InstanceType, step: Step, role: str) -> StepWork:
    if step.component is not None:
        plan = component_plan(config, step.component) if needed(config, facts, step.component) else None
        if plan is not None and plan.action == "adopt":
            return StepWork(step=step.name, work="adopt", seconds=ADOPT_SECONDS)
        if plan is not None:
            return StepWork(step=step.name, work="install", seconds=step.seconds)
        # Docker comes with containers on every node; NVIDIA's toolkit only decides the GPU part.
        if step.name == "install_container_runtime" and config.containers:
            return StepWork(step=step.name, work="install", seconds=step.seconds)
        return StepWork(step=step.name, work="skip", seconds=0)
    if step.name == "install_exporters" and not config.exporters:
        return StepWork(step=step.name, work="skip", seconds=0)
    # code-server installs only on the node it runs on.
    if step.name == "install_code_server" and role != config.code_server_role:
        return StepWork(step=step.name, work="skip", seconds=0)
    return StepWork(step=step.name, work="install", seconds=step.seconds)


def boot_work(config: BootstrapConfig, name: str, *, baked: bool, role: str = "worker") -> BootWork:
    """Return kiln's estimate of the setup at boot of a CONFIG node of instance type NAME and node ROLE (controller,
    login, worker): every install step's work (a marker compare on a BAKED image), then every configure step."""
    profile = config.profile
    facts = instance_type(name)
    work = []
    for step_name in profile.install_steps:
        step = STEPS[step_name]
        if baked:
            work.append(StepWork(step=step.name, work="baked", seconds=BAKED_SECONDS))
        else:
            work.append(_install_work(config, facts, step, role))
    work.extend(_user_work(step, role, baked=baked) for step in config.user_steps_of("install"))
    work.extend(StepWork(step=s, work="run", seconds=STEPS[s].seconds) for s in profile.configure_steps)
    work.extend(_user_work(step, role, baked=baked) for step in config.user_steps_of("configure"))
    return BootWork(instance_type=name, steps=tuple(work))


def _user_work(step: UserStep, role: str, *, baked: bool) -> StepWork:
    """Return what user STEP does at boot on a node of ROLE, with kiln's placeholder figures (it cannot know)."""
    if step.phase == "install" and baked:
        # The bake ran it for every role; the boot compares its marker.
        return StepWork(step=step.step, work="baked", seconds=BAKED_SECONDS)
    if role not in step.roles:
        return StepWork(step=step.step, work="skip", seconds=0)
    if step.phase == "install":
        return StepWork(step=step.step, work="install", seconds=USER_INSTALL_SECONDS)
    return StepWork(step=step.step, work="run", seconds=USER_CONFIGURE_SECONDS)


def bootstrap_timeout(work: BootWork, default_seconds: int) -> int:
    """Return the bootstrap timeout for a node doing WORK: the platform's default, or the estimate with headroom
    rounded up to whole 5 minutes where that is longer."""
    stretched = math.ceil(work.seconds * TIMEOUT_HEADROOM / TIMEOUT_STEP_SECONDS) * TIMEOUT_STEP_SECONDS
    return max(default_seconds, stretched)


@dataclass(frozen=True, kw_only=True)
class Deadline:
    """How long a platform waits for a node that scales from zero to finish its setup, and whether kiln sets it."""

    seconds: int
    # The setting, as its platform names it: "PCS's ResumeTimeout".
    name: str
    # True: kiln sets it from the estimate (bootstrap_timeout); False: fixed, so a node past it must boot a bake.
    settable: bool


# ParallelCluster's bootstrap timeouts (platforms.json), per role of node they bound.
PARALLELCLUSTER_TIMEOUTS = {"controller": "head_node_bootstrap_timeout", "worker": "compute_node_bootstrap_timeout"}


def parallelcluster_deadline(role: str) -> Deadline:
    """Return ParallelCluster's bootstrap timeout for a node of ROLE (controller or worker), at its default."""
    timeout = service_fact("parallelcluster", PARALLELCLUSTER_TIMEOUTS[role]).value
    return Deadline(seconds=timeout["default_seconds"], name=timeout["property"].rsplit("/", 1)[-1], settable=True)


def deadline(target: str, role: str) -> Deadline | None:
    """Return the deadline TARGET's platform gives the setup of a node of ROLE (controller, login or worker) by
    default; None where kiln knows of none."""
    limit = PROFILES[target].boot_deadline
    if limit == "resume_timeout" and role == "worker":
        fixed = service_fact("pcs", "resume_timeout_seconds").value
        return Deadline(seconds=fixed, name="PCS's ResumeTimeout", settable=False)
    if limit == "bootstrap_timeout" and role in PARALLELCLUSTER_TIMEOUTS:
        return parallelcluster_deadline(role)
    return None


def budget_line(kind: str, work: BootWork, limit: Deadline | None) -> str:
    """Return one line for `kiln validate` and `kiln report`: the estimate, its heaviest steps and the deadline."""
    heaviest = ", ".join(f"{s.step} {math.ceil(s.seconds / 60)}" for s in work.heaviest())
    line = f"{kind} ({work.instance_type}): setup at boot ~{work.minutes} min by kiln's estimate"
    if heaviest:
        line += f" ({heaviest} min)"
    if limit is None:
        return line
    if limit.settable:
        return f"{line}; kiln sets {limit.name} to {bootstrap_timeout(work, limit.seconds) // 60} min"
    return f"{line}; {limit.name} is {limit.seconds // 60} min"


def deadline_seconds(work: BootWork, limit: Deadline) -> int:
    """Return how long LIMIT's platform waits for a node doing WORK: the timeout kiln sets from the estimate where the
    deadline is settable, else the fixed deadline."""
    return bootstrap_timeout(work, limit.seconds) if limit.settable else limit.seconds


def tight_budget(kind: str, work: BootWork, limit: Deadline | None, *, baked: BootWork) -> str | None:
    """Return one warning line when KIND's setup leaves less than BOOT_MARGIN of its platform's deadline (or runs past
    it, for nodes that are not refused: static ones), with the bake that shortens it; else None. BAKED is the same
    node's estimate on a baked image."""
    if limit is None:
        return None
    seconds = deadline_seconds(work, limit)
    margin = math.ceil(seconds * BOOT_MARGIN)
    if seconds - work.seconds >= margin:
        return None
    kept = f"the {margin // 60}-min margin ({BOOT_MARGIN:.0%}) kiln keeps for mirror speed and instance boot time"
    given = f"{seconds // 60} min {limit.name} gives them"
    if work.seconds > seconds:
        line = f"take ~{work.minutes} min by kiln's estimate, past the {given} and {kept}"
    else:
        line = f"take ~{work.minutes} of the {given} by kiln's estimate, inside {kept}"
    line = f"boot budget tight: {kind} nodes ({work.instance_type}) {line}"
    if baked.seconds < work.seconds:
        return (
            f"{line}: bake the install steps into the image (compute.image.bake: true; `kiln ami build --spec SPEC` "
            f"bakes again), and they boot in ~{baked.minutes} min"
        )
    return f"{line}, on a baked image already: move work off the node's boot (bootstrap.steps)"


def over_budget(kind: str, work: BootWork, limit: Deadline | None, *, baked: BootWork) -> str | None:
    """Return the one line refusing KIND's nodes, which scale from zero, when their setup cannot fit a fixed
    deadline; else None. BAKED is the same node's estimate on a baked image: the remedy the line recommends."""
    if limit is None or limit.settable or work.seconds <= limit.seconds:
        return None
    return (
        f"not boot-ready: {kind} nodes ({work.instance_type}) scale from zero, and their setup at boot takes "
        f"~{work.minutes} min by kiln's estimate, past {limit.name} of {limit.seconds // 60} min: bake the install "
        f"steps into the image (compute.image.bake: true), and they boot in ~{baked.minutes} min"
    )
