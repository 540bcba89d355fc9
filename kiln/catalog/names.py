"""Names and paths that AWS, Slurm and node shells impose, written once for every layer (stdlib only).

Every pattern here is matched whole (re.fullmatch): a trailing newline or space never passes. Character
classes are spelled out in ASCII ([0-9], not \\d, which also matches other scripts' digits).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
REGIONS_PATH = DATA_DIR / "regions.json"

# Where a node's local scratch (instance-store NVMe, or a volume) is mounted for container storage by default
# (configure_container_storage); a local cluster's nodes have theirs under the prefix. The bootstrap, the health
# check (container-space) and the local cluster's disk-full fault all name it from here.
SCRATCH_DIR = "/scratch"

# The cluster's name: prefixes stacks and resources and becomes KILN_CLUSTER_NAME, the Slurm ClusterName,
# the HyperPod, ParallelCluster and EKS cluster names. HyperPod's must also end in a letter or digit, which
# the spec rules check beside this pattern.
CLUSTER_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
CLUSTER_NAME_RULE = "a lowercase letter, then up to 30 lowercase letters, digits or '-'"

# A node group becomes a Slurm partition, a PCS node group and queue, a ParallelCluster queue, a HyperPod
# instance group and an EKS node-group label value; 25 characters is what the shortest of them (PCS, with
# kiln's suffixes) allows, and HyperPod names and Kubernetes label values end in a letter or digit.
NODE_GROUP_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,23}[a-z0-9])?")
NODE_GROUP_NAME_RULE = "a lowercase letter, then up to 24 lowercase letters, digits or '-', not ending in '-'"

# SageMaker names an EC2 type with this prefix (ml.p5.48xlarge); kiln's catalog keys are EC2 names.
HYPERPOD_TYPE_PREFIX = "ml."

# The Slurm generic resources (GRES) a node's accelerators are declared as, where kiln declares them (gres.conf on
# the local cluster, a PCS node group's GRES settings), and what kiln-metrics counts in sinfo's Gres columns.
GPU_GRES = "gpu"
NEURON_GRES = "neuron"


def neuron_device_files(count: int) -> str:
    """Return a node's COUNT Neuron device files as a gres.conf File range: the driver names them /dev/neuron0, ...
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/containers/tutorials/build-run-neuron-container.html)."""
    return f"/dev/neuron[0-{count - 1}]"


# An absolute path a spec sends to nodes (checkpoint_dir, a login shell): written into shell files, so
# no spaces, quotes, shell metacharacters or control characters.
NODE_PATH = re.compile(r"/[A-Za-z0-9._/+@%=:,-]*")
NODE_PATH_RULE = "an absolute path of letters, digits and . _ / + @ % = : , -"

# An NCCL/EFA or Neuron variable of the spec's launcher.env: written as NAME=value into nccl.env (read unquoted
# by docker --env-file and enroot) and profile.sh, so both sides are plain.
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
ENV_NAME_RULE = "upper-case letters, digits and '_', not starting with a digit"
ENV_VALUE = re.compile(r"[A-Za-z0-9^_,.:/=+-]*")
ENV_VALUE_RULE = "letters, digits and ^ _ , . : / = + - only"

# A pinned software version (spec software.*): goes into bundle.env, download URLs and install paths.
VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}(?:[-.+~][0-9A-Za-z.]+)?")
VERSION_RULE = "a version such as 1.41.0"

SHA256 = re.compile(r"[0-9a-f]{64}")
SHA256_RULE = "64 lowercase hex digits of sha256"

# NCCL as NVIDIA's CUDA repositories version it (the same string for apt and dnf): 2.27.3-1+cuda12.9.
NCCL_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+\+cuda[0-9]+\.[0-9]+")
NCCL_VERSION_RULE = "an NCCL package version such as 2.27.3-1+cuda12.9"

# NVIDIA's DCGM exporter releases pair a DCGM version with an exporter version, written as their container tags
# write them: DCGM-EXPORTER, e.g. 4.6.0-4.8.3 (DCGM 4.6.0, exporter 4.8.3). Nodes install both at those versions.
DCGM_EXPORTER_VERSION = re.compile(r"([0-9]+\.[0-9]+\.[0-9]+)-([0-9]+\.[0-9]+\.[0-9]+)")
DCGM_EXPORTER_VERSION_RULE = "a DCGM-exporter version pair such as 4.6.0-4.8.3 (DCGM 4.6.0 with exporter 4.8.3)"

# A lock file named by a spec: a relative path below the spec's directory, ending in .json.
LOCK_FILE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9._-]*/)*[A-Za-z0-9_][A-Za-z0-9._-]*\.json")
LOCK_FILE_RULE = "a relative path of letters, digits and . _ - ending in .json, below the spec's directory"
# A user bootstrap step's name: it names the step in logs, markers (/etc/kiln/image/user_NAME.env) and bundle.env
# variables (KILN_USER_STEP_NAME_...), so lowercase letters, digits and '_' only.
USER_STEP_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
USER_STEP_NAME_RULE = "a lowercase letter, then up to 31 lowercase letters, digits or '_'"
# A user step's script: a relative path below the spec's directory, of plain path characters (no '..' part: the
# rules refuse it, and the file must also resolve inside the directory, symlinks followed).
USER_STEP_PATH = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9._-]*/)*[A-Za-z0-9_][A-Za-z0-9._-]*")
USER_STEP_PATH_RULE = "a relative path of letters, digits and . _ - below the spec's directory"
# A Linux user a service runs as (useradd's portable names).
LINUX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
LINUX_USER_RULE = "a lowercase letter or '_', then up to 31 of a-z, 0-9, '_', '-'"

# Region and availability zone names: their shape (the region must also be one of known_regions()).
REGION = re.compile(r"[a-z]{2,4}(?:-[a-z]+){1,3}-[0-9]{1,2}")
AVAILABILITY_ZONE = re.compile(REGION.pattern + r"[a-z]")

# S3 bucket names (S3 general purpose bucket naming rules).
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
BUCKET_NAME_RULE = "3-63 of a-z, 0-9, '.', '-', starting and ending with a letter or digit"
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3", "--table-s3", ".mrap")
_IPV4 = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")

# The characters AWS accepts in tag keys and values across services (letters, digits and spaces in any
# script, and _ . : / = + - @), as in CloudFormation's ^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$.
TAG_RULE = "letters, digits, spaces and _ . : / = + - @"
_TAG_PUNCTUATION = frozenset("_.:/=+-@")


def is_node_group_name(text: object) -> bool:
    """Return True when TEXT is a valid node group name, whole (no trailing newline or space)."""
    return isinstance(text, str) and NODE_GROUP_NAME.fullmatch(text) is not None


def matches(pattern: re.Pattern[str], text: object) -> bool:
    """Return True when TEXT is a string that PATTERN matches whole."""
    return isinstance(text, str) and pattern.fullmatch(text) is not None


def is_bucket_name(text: object) -> bool:
    """Return True when TEXT is a valid S3 general purpose bucket name."""
    if not matches(BUCKET_NAME, text):
        return False
    if ".." in text or ".-" in text or "-." in text or _IPV4.fullmatch(text):
        return False
    return not text.startswith(_BUCKET_PREFIXES) and not text.endswith(_BUCKET_SUFFIXES)


def is_tag_text(text: object) -> bool:
    """Return True when TEXT holds only characters AWS accepts in tags (see TAG_RULE)."""
    if not isinstance(text, str):
        return False
    return all(ch in _TAG_PUNCTUATION or unicodedata.category(ch)[0] in "LZN" for ch in text)


def is_plain_word(text: object) -> bool:
    """Return True when TEXT is non-empty, printable and without whitespace: shown as it is in a field path."""
    return isinstance(text, str) and text.isprintable() and not any(ch.isspace() for ch in text) and text != ""


@lru_cache(maxsize=1)
def regions_by_partition() -> dict[str, tuple[str, ...]]:
    """Return the AWS regions kiln knows, by partition (kiln/catalog/data/regions.json)."""
    data = json.loads(REGIONS_PATH.read_text())
    return {partition: tuple(names) for partition, names in data["partitions"].items()}


def known_regions() -> frozenset[str]:
    """Return every AWS region name kiln knows."""
    return frozenset(name for names in regions_by_partition().values() for name in names)


def hyperpod_type_name(ec2_name: str) -> str:
    """Return SageMaker's name for the EC2 type EC2_NAME (an ml. name is returned as it is)."""
    return ec2_name if ec2_name.startswith(HYPERPOD_TYPE_PREFIX) else HYPERPOD_TYPE_PREFIX + ec2_name


def ec2_type_name(name: str) -> str:
    """Return the EC2 name of NAME, which may be SageMaker's ml. name."""
    return name.removeprefix(HYPERPOD_TYPE_PREFIX)
