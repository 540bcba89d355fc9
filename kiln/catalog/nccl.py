"""Resolve the NCCL/EFA environment for an instance type. Standard library only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kiln.catalog.facts import DATA_DIR, InstanceType, instance_type

PRESETS_PATH = DATA_DIR / "nccl_presets.json"


@dataclass(frozen=True, kw_only=True)
class SoftwareVersions:
    """Installed versions that change which knobs are needed; None means unknown."""

    aws_ofi_nccl: str | None = None
    libfabric: str | None = None


@lru_cache(maxsize=1)
def presets() -> dict[str, Any]:
    """Return the preset document (rules and forbidden prefixes)."""
    return json.loads(PRESETS_PATH.read_text())


def version_tuple(version: str) -> tuple[int, ...]:
    """Turn '1.18.2' or '1.7.4-aws' into a comparable tuple of ints."""
    parts = []
    for piece in version.replace("-", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _below(installed: str | None, bound: str) -> bool:
    return installed is not None and version_tuple(installed) < version_tuple(bound)


def _one_of(value: Any, want: str | list[str]) -> bool:
    return value in ([want] if isinstance(want, str) else want)


def _matches(when: Mapping[str, Any], facts: InstanceType, versions: SoftwareVersions, fork_enomem: bool) -> bool:
    checks = {
        "efa": lambda want: facts.efa_supported == want,
        "device_rdma": lambda want: facts.efa_device_rdma == want,
        "gpu_interconnect": lambda want: _one_of(facts.gpu_interconnect, want),
        "aws_ofi_nccl_below": lambda bound: _below(versions.aws_ofi_nccl, bound),
        "libfabric_below": lambda bound: _below(versions.libfabric, bound),
        "fork_enomem": lambda want: fork_enomem == want,
    }
    unknown = set(when) - set(checks)
    if unknown:
        raise ValueError(f"nccl preset condition not understood: {sorted(unknown)}; allowed: {sorted(checks)}")
    return all(checks[key](value) for key, value in when.items())


def forbidden_variable(name: str) -> str | None:
    """Return the forbidden prefix NAME starts with, if any."""
    return next((p for p in presets()["forbidden_prefixes"] if name.startswith(p)), None)


def preset_environment(
    instance: str,
    *,
    versions: SoftwareVersions = SoftwareVersions(),
    fork_enomem: bool = False,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the NCCL/EFA variables for INSTANCE: matching presets, then OVERRIDES."""
    facts = instance_type(instance)
    env: dict[str, str] = {}
    for rule in presets()["rules"]:
        if _matches(rule["when"], facts, versions, fork_enomem):
            env.update(rule["env"])
    for name, value in (overrides or {}).items():
        prefix = forbidden_variable(name)
        if prefix:
            raise ValueError(f"{name}: variables starting with {prefix} must not be set (they break EFA)")
        env[name] = str(value)
    return env
