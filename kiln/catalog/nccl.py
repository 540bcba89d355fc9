"""Resolve the NCCL/EFA environment for an instance type. Standard library only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kiln.catalog.facts import ACCELERATOR_KINDS, DATA_DIR, GPU_INTERCONNECTS, InstanceType, instance_type
from kiln.catalog.names import ENV_NAME, ENV_NAME_RULE, ENV_VALUE, ENV_VALUE_RULE

PRESETS_PATH = DATA_DIR / "nccl_presets.json"
NO_ACCELERATOR = "none"
# Conditions that name one of a closed set of values (or a list of them): a misspelt value would never match.
CHOICES = {"accelerator": (*ACCELERATOR_KINDS, NO_ACCELERATOR), "gpu_interconnect": GPU_INTERCONNECTS}
# kiln's own bounds on the NCCL/EFA and Neuron overrides (launcher.env, --nccl-env, KILN_NCCL_ENV): the presets set
# 11 variables in all, named in at most 24 characters with values of at most 15 (^docker,lo,veth), and the compile
# cache's root one more of 25 characters (/fsx/neuron-compile-cache). 64 variables, named
# in up to 64 characters, of up to 256 characters each leave room for any tuning (words, numbers, interface lists,
# paths) while keeping nccl.env and profile.sh, written per instance type, about 20 KB at most.
MAX_OVERRIDES = 64
MAX_OVERRIDE_NAME_CHARS = 64
MAX_OVERRIDE_VALUE_CHARS = 256


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


def _matches(
    when: Mapping[str, Any], facts: InstanceType, versions: SoftwareVersions, fork_enomem: bool, container: bool
) -> bool:
    checks = {
        "efa": lambda want: facts.efa_supported == want,
        "device_rdma": lambda want: facts.efa_device_rdma == want,
        "accelerator": lambda want: (facts.accelerator_kind or NO_ACCELERATOR) in _values(want),
        "gpu_interconnect": lambda want: facts.gpu_interconnect in _values(want),
        "aws_ofi_nccl_below": lambda bound: _below(versions.aws_ofi_nccl, bound),
        "libfabric_below": lambda bound: _below(versions.libfabric, bound),
        "fork_enomem": lambda want: fork_enomem == want,
        "container": lambda want: container == want,
    }
    unknown = set(when) - set(checks)
    if unknown:
        raise ValueError(f"nccl preset condition not understood: {sorted(unknown)}; allowed: {sorted(checks)}")
    for key, allowed in CHOICES.items():
        wrong = sorted(set(_values(when.get(key, []))) - set(allowed))
        if wrong:
            raise ValueError(f"nccl preset condition {key}: {wrong} not understood; allowed: {list(allowed)}")
    return all(checks[key](value) for key, value in when.items())


@dataclass(frozen=True, kw_only=True)
class EfaSoftware:
    """Where an image keeps NCCL's EFA stack (nccl_presets.json, efa_software, with its sources), in search order."""

    plugin_names: tuple[str, ...]
    plugin_dirs: tuple[str, ...]
    libfabric_dirs: tuple[str, ...]
    libfabric_library: str
    tool_dirs: tuple[str, ...]
    tool: str


@lru_cache(maxsize=1)
def efa_software() -> EfaSoftware:
    """Return where images keep the aws-ofi-nccl plugin, libfabric and fi_info."""
    raw = presets()["efa_software"]
    return EfaSoftware(
        plugin_names=tuple(raw["plugin_names"]),
        plugin_dirs=tuple(raw["plugin_dirs"]),
        libfabric_dirs=tuple(raw["libfabric_dirs"]),
        libfabric_library=raw["libfabric_library"],
        tool_dirs=tuple(raw["tool_dirs"]),
        tool=raw["tool"],
    )


def forbidden_variable(name: str) -> str | None:
    """Return the forbidden prefix NAME starts with, if any."""
    return next((p for p in presets()["forbidden_prefixes"] if name.startswith(p)), None)


def allowed_prefixes() -> tuple[str, ...]:
    """Return the variable families an override may set (nccl_presets.json, allowed_prefixes)."""
    return tuple(presets()["allowed_prefixes"])


def variable_family(name: str) -> str | None:
    """Return which types NAME's family reaches: 'neuron', 'not_neuron', or None for every type (nccl_presets.json)."""
    return next((kind for prefix, kind in presets()["families"].items() if name.startswith(prefix)), None)


def reaches(name: str, facts: InstanceType) -> bool:
    """Return True when a type of FACTS reads variable NAME (its family's kind of accelerator)."""
    family = variable_family(name)
    if family is None:
        return True
    return (family == "neuron") == bool(facts.neuron_count)


@dataclass(frozen=True, kw_only=True)
class NeuronCompileCache:
    """Where Neuron jobs keep compiled graphs on the shared file system (nccl_presets.json, neuron_compile_cache):
    VARIABLE names the cache Neuron uses; the node environment carries ROOT as ROOT_VARIABLE, under which the launcher
    gives each job and node a directory of its own (kiln.launcher.compile_cache)."""

    variable: str
    root_variable: str
    root: str
    source: str


@lru_cache(maxsize=1)
def neuron_compile_cache() -> NeuronCompileCache:
    """Return the Neuron Persistent Cache's variable, and the variable and value of its root on kiln's FSx mount."""
    raw = presets()["neuron_compile_cache"]
    return NeuronCompileCache(
        variable=raw["variable"], root_variable=raw["root_variable"], root=raw["root"], source=raw["source"]
    )


def names_cache_dir(flags: str) -> bool:
    """Return True when Neuron compiler FLAGS (NEURON_CC_FLAGS) name their own --cache_dir."""
    return any(word == "--cache_dir" or word.startswith("--cache_dir=") for word in flags.split())


def precompile_command() -> str:
    """Return the command that precompiles Neuron graphs around a training command (neuron_parallel_compile)."""
    return presets()["precompile"]["command"]


def override_count_problem(count: int) -> str | None:
    """Return why COUNT overrides are too many (one line), or None."""
    if count > MAX_OVERRIDES:
        return f"at most {MAX_OVERRIDES} variables (got {count})"
    return None


def override_name_problem(name: str) -> str | None:
    """Return why NAME may not be an NCCL/EFA override (one line, without echoing NAME), or None when it may."""
    if not ENV_NAME.fullmatch(name):
        return f"is not a valid variable name: {ENV_NAME_RULE}"
    if len(name) > MAX_OVERRIDE_NAME_CHARS:
        return f"name is {len(name)} characters; at most {MAX_OVERRIDE_NAME_CHARS}"
    prefix = forbidden_variable(name)
    if prefix:
        return f"must not be set: {prefix}* variables break EFA"
    if not name.startswith(allowed_prefixes()):
        families = " or ".join(allowed_prefixes())
        return (
            f"is not an NCCL, libfabric or Neuron variable: names start with {families} (the families kiln's presets "
            "set)"
        )
    return None


def override_value_problem(value: str, *, plain: bool = True) -> str | None:
    """Return why VALUE may not be an override's value (one line, without echoing VALUE), or None when it may.

    PLAIN: the value is written into files a shell or docker reads unquoted (nccl.env, profile.sh), so it must also
    be plain text; the launcher sets its overrides in a process's environment directly and passes plain=False.
    """
    if len(value) > MAX_OVERRIDE_VALUE_CHARS:
        return f"value is {len(value)} characters; at most {MAX_OVERRIDE_VALUE_CHARS}"
    if plain and not ENV_VALUE.fullmatch(value):
        return f"value must be {ENV_VALUE_RULE}"
    return None


def preset_environment(
    instance: str,
    *,
    versions: SoftwareVersions = SoftwareVersions(),
    fork_enomem: bool = False,
    container: bool = False,
    overrides: Mapping[str, str] | None = None,
    shared_cache: bool = False,
) -> dict[str, str]:
    """Return the NCCL/EFA and Neuron variables for INSTANCE: matching presets, then the OVERRIDES its type reads.

    CONTAINER: the variables go into a container's environment (a `kiln job submit` pod), whose image brings its own
    libfabric and aws-ofi-nccl; the rules for containers add AWS's pod environment for EFA.
    SHARED_CACHE: the nodes mount kiln's FSx for Lustre; a Neuron type then gets the compile cache's root there
    (neuron_compile_cache: the launcher picks the job's and node's directory under it), unless the overrides name a
    cache of their own.
    """
    facts = instance_type(instance)
    env: dict[str, str] = {}
    for rule in presets()["rules"]:
        if _matches(rule["when"], facts, versions, fork_enomem, container):
            env.update(rule["env"])
    overrides = dict(overrides or {})
    if why := override_count_problem(len(overrides)):
        raise ValueError(f"NCCL/EFA overrides: {why}")
    for name, value in overrides.items():
        prefix = forbidden_variable(name)
        if prefix:
            raise ValueError(f"{name}: variables starting with {prefix} must not be set (they break EFA)")
        why = override_name_problem(name) or override_value_problem(str(value), plain=False)
        if why:
            raise ValueError(f"{name!r}: {why}")
        if reaches(name, facts):
            env[name] = str(value)
    cache = neuron_compile_cache()
    own_cache = cache.variable in env or names_cache_dir(env.get("NEURON_CC_FLAGS", ""))
    if shared_cache and facts.neuron_count and not own_cache:
        env[cache.root_variable] = cache.root
    return env
