"""Choose the NCCL/EFA variables for this node and set them without touching the user's own.

Precedence, strongest first: a variable already in the environment (the user
set it), then the user's overrides (``--nccl-env`` beats ``KILN_NCCL_ENV``),
then the catalog preset for the instance type. With no instance type, or one
the catalog does not know, no preset applies and the plan says why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field

from kiln.catalog import SoftwareVersions, UnknownInstanceType, preset_environment
from kiln.catalog.nccl import (
    forbidden_variable,
    override_count_problem,
    override_name_problem,
    override_value_problem,
)
from kiln.launcher.errors import UsageError

_TRUE = {"1", "true", "yes", "on"}


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
    families, too many, or a value too long (kiln.catalog.nccl, the rule launcher.nccl_env follows too)."""
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
) -> NcclPlan:
    """Return the NCCL/EFA plan for INSTANCE_TYPE given the current ENVIRON."""
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


def apply(nccl_plan: NcclPlan, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the plan's variables that ENVIRON lacks; return what was set."""
    applied = {}
    for name, value in nccl_plan.to_set().items():
        # Re-check at apply time: never clobber, even if the environment changed since planning.
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied
