"""Choose the NCCL/EFA and Neuron variables for this node and set them without touching the user's own.

Precedence, strongest first: a variable already in the environment (the user
set it), then the user's overrides (``--nccl-env`` beats ``KILN_NCCL_ENV``),
then the node's environment file (``/etc/kiln/nccl.env``, which the bootstrap
renders for this node's instance type: the presets, the spec's ``launcher.env``
and, on a Neuron node with FSx, the compile cache's root), then the catalog preset for
the instance type. The launcher adds the Neuron compile cache directory it chose for the
job and node (kiln.launcher.compile_cache) with the same precedence. With no
instance type, or one the catalog does not know, no preset applies and the plan
says why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln.catalog import SoftwareVersions, UnknownInstanceType, preset_environment
from kiln.catalog.names import ENV_NAME
from kiln.catalog.nccl import (
    forbidden_variable,
    override_count_problem,
    override_name_problem,
    override_value_problem,
)
from kiln.launcher.errors import LaunchError, UsageError

_TRUE = {"1", "true", "yes", "on"}
# The node's environment file (configure_training_env), under KILN_ROOT where that is set; KILN_NCCL_ENV_FILE
# (launcher.env) names it too.
NODE_ENV_FILE = "/etc/kiln/nccl.env"


@dataclass(frozen=True, kw_only=True)
class NcclPlan:
    """What to set, where each value came from, and what the user's environment keeps."""

    instance_type: str | None
    wanted: dict[str, tuple[str, str]]
    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_set(self) -> dict[str, str]:
        """Return the variables the launcher will set (those the user did not)."""
        return {name: value for name, (value, _) in self.wanted.items() if name not in self.kept}

    def as_dict(self) -> dict[str, object]:
        """Return the JSON-ready form used by run records and reports."""
        return {
            "instance_type": self.instance_type,
            "set": {name: {"value": v, "source": s} for name, (v, s) in self.wanted.items() if name not in self.kept},
            "kept_from_environment": self.kept,
            "notes": list(self.notes),
        }


def parse_overrides(pairs: Iterable[str], env_json: str | None) -> dict[str, str]:
    """Merge KILN_NCCL_ENV (a JSON object) with --nccl-env KEY=VALUE pairs; the pairs win."""
    overrides: dict[str, str] = {}
    if env_json:
        try:
            document = json.loads(env_json)
        except json.JSONDecodeError as error:
            raise UsageError(f"KILN_NCCL_ENV: not JSON ({error.msg})") from None
        except RecursionError:
            # Python's decoder recurses per level: a thousand '[' would otherwise end the launcher in a traceback.
            raise UsageError("KILN_NCCL_ENV: nests too deeply; expected a JSON object of NAME: value") from None
        if not isinstance(document, dict):
            raise UsageError("KILN_NCCL_ENV: expected a JSON object of NAME: value")
        overrides.update({str(k): str(v) for k, v in document.items()})
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--nccl-env: expected NAME=VALUE (got {pair!r})")
        overrides[name] = value
    return overrides


def check_overrides(overrides: Mapping[str, str]) -> None:
    """Raise UsageError for an override the catalog does not allow: RDMAV_*, a variable outside NCCL's and libfabric's
    families, too many, or a value too long (kiln.catalog.nccl, the rule launcher.env follows too)."""
    if why := override_count_problem(len(overrides)):
        raise UsageError(f"--nccl-env/KILN_NCCL_ENV: {why}")
    for name, value in overrides.items():
        prefix = forbidden_variable(name)
        if prefix:
            raise UsageError(f"{name}: variables starting with {prefix} must not be set (they break EFA)")
        # The values go into the job's environment directly, never through a shell: any characters will do.
        why = override_name_problem(name) or override_value_problem(value, plain=False)
        if why:
            raise UsageError(f"{name[:80]!r}: {why}")


def node_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """Return the node's environment file (NAME=value lines) and its path; ({}, None) where the node has none."""
    named = environ.get("KILN_NCCL_ENV_FILE")
    path = Path(named) if named else Path(environ.get("KILN_ROOT", "/").rstrip("/") + NODE_ENV_FILE)
    try:
        text = path.read_text()
    except FileNotFoundError:
        if named:
            raise LaunchError(f"KILN_NCCL_ENV_FILE: {named} does not exist (the node's environment file)") from None
        return {}, None
    except OSError as error:
        raise LaunchError(f"{path}: cannot be read ({error.strerror})") from None
    values = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise LaunchError(f"{path}:{number}: expected NAME=value (the node's environment file)")
        values[name] = value
    return values, str(path)


def software_versions(environ: Mapping[str, str]) -> SoftwareVersions:
    """Return the aws-ofi-nccl and libfabric versions the node's bootstrap exported, if any."""
    return SoftwareVersions(
        aws_ofi_nccl=environ.get("KILN_AWS_OFI_NCCL_VERSION") or None,
        libfabric=environ.get("KILN_LIBFABRIC_VERSION") or None,
    )


def plan(
    instance_type: str | None,
    *,
    environ: Mapping[str, str] = os.environ,
    overrides: Mapping[str, str] | None = None,
    versions: SoftwareVersions | None = None,
    node_file: tuple[Mapping[str, str], str | None] = ({}, None),
) -> NcclPlan:
    """Return the NCCL/EFA plan for INSTANCE_TYPE given the current ENVIRON and the node's environment file
    (node_environment: its values and path)."""
    overrides = dict(overrides or {})
    check_overrides(overrides)
    versions = versions or software_versions(environ)
    fork_enomem = environ.get("KILN_FORK_ENOMEM", "").lower() in _TRUE
    notes: list[str] = []
    wanted: dict[str, tuple[str, str]] = {}
    if instance_type is None:
        notes.append("no instance type known: no catalog preset applied")
    else:
        try:
            preset = preset_environment(instance_type, versions=versions, fork_enomem=fork_enomem)
        except UnknownInstanceType as error:
            notes.append(f"{error}: no catalog preset applied")
        else:
            wanted.update({name: (value, f"preset {instance_type}") for name, value in preset.items()})
    values, path = node_file
    # The file repeats the preset it was rendered from: a value the preset gives alike keeps the preset as source.
    wanted.update(
        {name: (value, path) for name, value in values.items() if name not in wanted or wanted[name][0] != value}
    )
    wanted.update({name: (value, "override") for name, value in overrides.items()})
    kept = {
        name: {"value": environ[name], "instead_of": value, "source": source}
        for name, (value, source) in wanted.items()
        if name in environ
    }
    notes.extend(
        f"{name} is set in the environment; AWS guidance is never to set {forbidden_variable(name)}* with EFA"
        for name in sorted(environ)
        if forbidden_variable(name)
    )
    return NcclPlan(instance_type=instance_type, wanted=wanted, kept=kept, notes=tuple(notes))


def with_value(nccl_plan: NcclPlan, name: str, value: str, source: str) -> NcclPlan:
    """Return NCCL_PLAN that also sets NAME to VALUE from SOURCE (kept, as every value is, where the user set NAME)."""
    return replace(nccl_plan, wanted={**nccl_plan.wanted, name: (value, source)})


def apply(nccl_plan: NcclPlan, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the plan's variables that ENVIRON lacks; return what was set."""
    applied = {}
    for name, value in nccl_plan.to_set().items():
        # Re-check at apply time: never clobber, even if the environment changed since planning.
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied
