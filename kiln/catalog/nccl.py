"""Resolve the NCCL/EFA environment for an instance type. Standard library only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kiln.catalog.facts import ACCELERATOR_KINDS, DATA_DIR, GPU_INTERCONNECTS, InstanceType, instance_type

PRESETS_PATH = DATA_DIR / "nccl_presets.json"
NO_ACCELERATOR = "none"
# Conditions that name one of a closed set of values (or a list of them): a misspelt value would never match.
CHOICES = {"accelerator": (*ACCELERATOR_KINDS, NO_ACCELERATOR), "gpu_interconnect": GPU_INTERCONNECTS}


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


def _values(want: str | list[str]) -> list[str]:
    return [want] if isinstance(want, str) else list(want)


def _matches(when: Mapping[str, Any], facts: InstanceType, versions: SoftwareVersions, fork_enomem: bool) -> bool:
    checks = {
        "efa": lambda want: facts.efa_supported == want,
        "device_rdma": lambda want: facts.efa_device_rdma == want,
        "accelerator": lambda want: (facts.accelerator_kind or NO_ACCELERATOR) in _values(want),
        "gpu_interconnect": lambda want: facts.gpu_interconnect in _values(want),
        "aws_ofi_nccl_below": lambda bound: _below(versions.aws_ofi_nccl, bound),
        "libfabric_below": lambda bound: _below(versions.libfabric, bound),
        "fork_enomem": lambda want: fork_enomem == want,
    }
    unknown = set(when) - set(checks)
    if unknown:
        raise ValueError(f"nccl preset condition not understood: {sorted(unknown)}; allowed: {sorted(checks)}")
    for key, allowed in CHOICES.items():
        wrong = sorted(set(_values(when.get(key, []))) - set(allowed))
        if wrong:
            raise ValueError(f"nccl preset condition {key}: {wrong} not understood; allowed: {list(allowed)}")
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
