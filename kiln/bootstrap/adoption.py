"""What each node adopts from its image and what kiln installs on it: the plan `kiln validate`, `kiln report` and
the bundle share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kiln.bootstrap.config import BootstrapConfig
from kiln.catalog import InstanceType, instance_type
from kiln.catalog.platforms import COMPONENTS, PIN_FIELDS

Action = Literal["adopt", "install"]


@dataclass(frozen=True, kw_only=True)
class ComponentPlan:
    """One component on one kind of node: adopted from the image (verified at boot) or installed by kiln."""

    component: str
    action: Action
    # adopt: the version the image's documentation names (the floor a node's copy must reach), None when only
    # presence is checked; install: the version kiln pins.
    version: str | None

    def describe(self) -> str:
        return self.component if self.version is None else f"{self.component} {self.version}"


def needed(config: BootstrapConfig, facts: InstanceType, component: str) -> bool:
    """Return whether a node of type FACTS in CONFIG's cluster needs COMPONENT at all."""
    containers = config.containers and config.profile.containers
    return {
        "nvidia_driver": facts.gpu_count > 0,
        "neuron": facts.neuron_count > 0,
        "efa_installer": facts.efa_supported,
        # NCCL comes from the framework or container unless the spec pins one for the host.
        "nccl": facts.gpu_count > 0 and (config.adopts("nccl") or bool(config.software.nccl)),
        "enroot": containers and config.runs_slurm,
        "pyxis": containers and config.runs_slurm,
        "nvidia_container_toolkit": containers and facts.gpu_count > 0,
        "lustre_client": config.lustre,
        # Every PCS node runs PCS's agent and Slurm.
        "pcs_agent": config.profile.runs_pcs_agent,
        "pcs_slurm": config.profile.runs_pcs_agent,
    }[component]


def component_plan(config: BootstrapConfig, component: str) -> ComponentPlan | None:
    """Return how CONFIG's nodes come by COMPONENT, or None where kiln neither adopts nor installs it."""
    if config.adopts(component):
        owned = config.image_profile.owned_on(config.os)[component]
        return ComponentPlan(component=component, action="adopt", version=owned.version)
    if component == "lustre_client":
        # The Lustre client follows the OS's repository: no version to pin.
        return ComponentPlan(component=component, action="install", version=None)
    pin = getattr(config.software, PIN_FIELDS[component])
    if not pin:
        return None
    return ComponentPlan(component=component, action="install", version=pin)


def node_plans(config: BootstrapConfig) -> dict[str, tuple[ComponentPlan, ...]]:
    """Return, per instance type of CONFIG's nodes, the components a node of it adopts and installs, in step order."""
    plans = {}
    for name in config.instance_types:
        facts = instance_type(name)
        chosen = (component_plan(config, c) for c in COMPONENTS if needed(config, facts, c))
        plans[name] = tuple(plan for plan in chosen if plan is not None)
    return plans


def plan_lines(
    config: BootstrapConfig, nodes: dict[str, str], roles: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Return one line per kind of node: what it adopts from the image, what kiln installs and which of the user's
    steps it runs.

    NODES maps each kind of node to its instance type, in the order to list them (`{"p5": "p5.48xlarge"}`); ROLES maps
    a kind to its node role (controller, login; worker where it names none).
    """
    plans = node_plans(config)
    lines = []
    for kind, name in nodes.items():
        adopted = ", ".join(plan.describe() for plan in plans[name] if plan.action == "adopt") or "nothing"
        installed = ", ".join(plan.describe() for plan in plans[name] if plan.action == "install") or "nothing"
        line = f"{kind} ({name}): adopts {adopted} from the {config.image_profile.title}; installs {installed}"
        role = (roles or {}).get(kind, "worker")
        if steps := [f"{step.name} ({step.phase})" for step in config.user_steps if role in step.roles]:
            line += f"; runs your steps {', '.join(steps)}"
        lines.append(line)
    return tuple(lines)
