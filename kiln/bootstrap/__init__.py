"""Node bootstrap: bash steps, jinja2 templates and the renderer that bundles them per target."""

from kiln.bootstrap.cluster_env import CLUSTER_ENV_PATH, CLUSTER_ENV_VARIABLES, cluster_env_text
from kiln.bootstrap.config import (
    TARGETS,
    BootstrapConfig,
    ClusterUser,
    NodeGroup,
    SoftwarePins,
)
from kiln.bootstrap.fetch import fetch_arguments, fetch_user_data
from kiln.bootstrap.local_target import LocalCluster, LocalNode
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import RenderedBundle, render_bundle

__all__ = [
    "CLUSTER_ENV_PATH",
    "CLUSTER_ENV_VARIABLES",
    "PROFILES",
    "TARGETS",
    "BootstrapConfig",
    "ClusterUser",
    "LocalCluster",
    "LocalNode",
    "NodeGroup",
    "RenderedBundle",
    "SoftwarePins",
    "fetch_arguments",
    "fetch_user_data",
    "cluster_env_text",
    "render_bundle",
]
