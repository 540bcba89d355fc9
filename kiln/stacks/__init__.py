"""The app's stacks: spec -> props -> constructs."""

from kiln.stacks.app import (
    FEATURE_FLAGS,
    ClusterStacks,
    NoSpecGiven,
    build_cluster,
    environment,
    new_app,
    spec_path_from_context,
)
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack

__all__ = [
    "FEATURE_FLAGS",
    "new_app",
    "ClusterStacks",
    "NetworkStack",
    "NoSpecGiven",
    "StorageStack",
    "build_cluster",
    "environment",
    "spec_path_from_context",
]
