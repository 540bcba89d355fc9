"""Names and paths that AWS, Slurm and node shells impose, written once for every layer (stdlib only)."""

from __future__ import annotations

import re

# A node group becomes a Slurm partition, a PCS node group and queue, a ParallelCluster queue and an
# EKS node-group label; 25 characters is what the shortest of them (PCS, with kiln's suffixes) allows.
NODE_GROUP_NAME = re.compile(r"[a-z][a-z0-9-]{0,24}")
NODE_GROUP_NAME_RULE = "a lowercase letter, then up to 24 lowercase letters, digits or '-'"

# SageMaker names an EC2 type with this prefix (ml.p5.48xlarge); kiln's catalog keys are EC2 names.
HYPERPOD_TYPE_PREFIX = "ml."

# An absolute path a spec sends to nodes (checkpoint_dir, a login shell): written into shell files, so
# no spaces, quotes, shell metacharacters or control characters.
NODE_PATH = re.compile(r"/[A-Za-z0-9._/+@%=:,-]*")
NODE_PATH_RULE = "an absolute path of letters, digits and . _ / + @ % = : , -"


def is_node_group_name(text: object) -> bool:
    """Return True when TEXT is a valid node group name, whole (no trailing newline or space)."""
    return isinstance(text, str) and NODE_GROUP_NAME.fullmatch(text) is not None


def hyperpod_type_name(ec2_name: str) -> str:
    """Return SageMaker's name for the EC2 type EC2_NAME (an ml. name is returned as it is)."""
    return ec2_name if ec2_name.startswith(HYPERPOD_TYPE_PREFIX) else HYPERPOD_TYPE_PREFIX + ec2_name


def ec2_type_name(name: str) -> str:
    """Return the EC2 name of NAME, which may be SageMaker's ml. name."""
    return name.removeprefix(HYPERPOD_TYPE_PREFIX)
