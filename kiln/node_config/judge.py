"""Load a spec and judge its nodes as `kiln validate`, `kiln report`, `kiln ci up` and the CDK app do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kiln.bootstrap.adoption import plan_lines
from kiln.bootstrap.lock import LockError
from kiln.bootstrap.readiness import BootReadiness, boot_readiness
from kiln.catalog.neuron import neuron_beta_note
from kiln.node_config.budget import boot_budget
from kiln.node_config.nodes import KIND_ROLES, node_kinds
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec, Problem, SpecError, load_spec


def lock_remedy(spec: ClusterSpec, path: str) -> str:
    """Return the one step that makes the downloads of the spec at PATH verifiable."""
    command = f"run `kiln bootstrap lock --spec {path}` on a machine with internet"
    if spec.lock_path is None:
        return f"add lock_file: {Path(path).stem}.lock.json under software, then {command}"
    return f"{command} (it writes {spec.lock_path})"


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
