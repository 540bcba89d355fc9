"""The one layer that reads the spec to build: spec -> bootstrap config (no CDK), spec -> props -> stacks.

Names load on first use (PEP 562), so `kiln.stacks.bootstrap_config` serves the local cluster and the
CLI without importing aws-cdk-lib.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FEATURE_FLAGS": "kiln.stacks.feature_flags",
    "ClusterStacks": "kiln.stacks.app",
    "NoSpecGiven": "kiln.stacks.app",
    "build_cluster": "kiln.stacks.app",
    "environment": "kiln.stacks.app",
    "new_app": "kiln.stacks.app",
    "spec_path_from_context": "kiln.stacks.app",
    "CiEnvironment": "kiln.stacks.ci_mode",
    "ci_environment": "kiln.stacks.ci_mode",
    "ComputeStack": "kiln.stacks.compute",
    "ReaperStack": "kiln.stacks.reaper",
    "NetworkStack": "kiln.stacks.network",
    "StorageStack": "kiln.stacks.storage",
    "config_from_spec": "kiln.stacks.bootstrap_config",
    "load_and_judge": "kiln.stacks.bootstrap_config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kiln.stacks' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
