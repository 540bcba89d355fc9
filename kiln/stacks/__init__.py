"""The app's stacks: spec -> props -> constructs."""

from kiln.stacks.app import FEATURE_FLAGS, ClusterStacks, build_cluster, environment, new_app
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack

__all__ = ["FEATURE_FLAGS", "new_app", "ClusterStacks", "NetworkStack", "StorageStack", "build_cluster", "environment"]
