"""The deploy-time contract: /etc/kiln/cluster.env, written by the compute construct's user data."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kiln.bootstrap.checks import BootstrapInputError, is_quotable

CLUSTER_ENV_PATH = "/etc/kiln/cluster.env"

# Every variable a node reads from cluster.env, with what it means. Values may be CDK tokens.
CLUSTER_ENV_VARIABLES: dict[str, str] = {
    "KILN_CLUSTER_NAME": "the cluster's name (Slurm ClusterName, resource prefixes)",
    "KILN_REGION": "the AWS region the node runs in",
    "KILN_NODE_ROLE": "controller, login or worker (default: the target's; ParallelCluster and HyperPod detect it)",
    "KILN_INSTANCE_TYPE": "the EC2 instance type (default: asked from IMDSv2)",
    "KILN_FSX_DNS": "FSx for Lustre DNS name",
    "KILN_FSX_MOUNT_NAME": "FSx for Lustre mount name",
    "KILN_MOUNT_POINT": "where FSx is mounted, e.g. /fsx",
    "KILN_BUCKET": "the cluster's data bucket",
    "KILN_SLURM_CONTROLLER_HOST": "slurmctld's host name (HyperPod: derived from its address)",
    "KILN_SLURM_CONTROLLER_ADDR": "slurmctld's address (HyperPod: read from resource_config.json)",
    "KILN_CONTAINER_VOLUME": "block device or mount point for container storage where there is no local NVMe",
    "KILN_SCRATCH_DIR": "where local NVMe is mounted for container storage (default /scratch)",
    "KILN_PROMETHEUS_REMOTE_WRITE_URL": "the Prometheus workspace's remote-write URL the agent sends metrics to",
}

_TOKEN = re.compile(r"\$\{Token\[[^\]]+\]\}")


def check_cluster_env(values: Mapping[str, str]) -> None:
    """Raise BootstrapInputError unless VALUES names only known variables with quotable values."""
    for name, value in values.items():
        if name not in CLUSTER_ENV_VARIABLES:
            raise BootstrapInputError(
                f"cluster.env: got variable {name!r}, allowed: {', '.join(CLUSTER_ENV_VARIABLES)}"
            )
        if not isinstance(value, str):
            raise BootstrapInputError(
                f"cluster.env {name}: got {type(value).__name__}, allowed: str (or a CDK token string)"
            )
        literal = _TOKEN.sub("", value)
        # Written as NAME='value' (here and by fetch.sh on the node), read by load_env_file and by shells:
        # inside single quotes only a quote or a control character could change what the line means.
        if not is_quotable(literal):
            raise BootstrapInputError(
                f"cluster.env {name}: got {value!r}, allowed: printable text, no single quotes or newlines"
            )


def cluster_env_text(values: Mapping[str, str]) -> str:
    """Return the content of cluster.env for VALUES, in KILN_NAME='value' lines."""
    check_cluster_env(values)
    lines = [
        "# shellcheck shell=bash disable=SC2034",
        "# Cluster values for kiln's node bootstrap (on AWS, written at deploy time by the compute construct).",
    ]
    lines += [f"{name}='{values[name]}'" for name in sorted(values)]
    return "\n".join(lines) + "\n"
