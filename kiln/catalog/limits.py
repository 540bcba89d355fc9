"""Numeric limits AWS (and kiln's own layout) impose, written once for the spec rules and the construct checks.

Standard library only. Each limit says where it comes from; the spec rules refuse a value past one of them
with one line, and the constructs refuse the same value with a ValueError, so whatever `kiln validate`
accepts also synthesizes.
"""

from __future__ import annotations

import ipaddress

# EBS gp3 volume size (EC2 CreateVolume: 1-16,384 GiB for gp3).
EBS_GP3_MAX_GIB = 16384
# kiln's floor for a node's root volume: the GPU images kiln boots (Ubuntu/AL2023 with drivers, CUDA,
# EFA and container layers before the first pull) do not fit in less. Spec rule and EfaLaunchTemplate share it.
ROOT_VOLUME_MIN_GIB = 40
ROOT_VOLUME_MAX_GIB = EBS_GP3_MAX_GIB
# The root volume kiln gives nodes whose size the spec does not set: PCS login nodes, the ParallelCluster head node.
SERVICE_NODE_ROOT_VOLUME_GIB = 200

# SageMaker HyperPod (CloudFormation AWS::SageMaker::Cluster): ClusterEbsVolumeConfig.VolumeSizeInGB
# 1-16,384 and ClusterInstanceGroup.InstanceCount 0-6,758 per instance group.
HYPERPOD_VOLUME_MIN_GIB = 1
HYPERPOD_VOLUME_MAX_GIB = 16384
HYPERPOD_MAX_INSTANCES_PER_GROUP = 6758

# AWS PCS controller sizes (CreateCluster `size`): the most compute nodes each size serves. kiln's spec allows
# at most the largest; PCS login nodes are compute node group instances too, so they count.
PCS_CLUSTER_SIZES: dict[str, int] = {"SMALL": 32, "MEDIUM": 512, "LARGE": 2048}
PCS_MAX_NODES = max(PCS_CLUSTER_SIZES.values())

# AWS ParallelCluster 3 (pcluster.constants / cluster_validators): at most 50 Slurm queues, and queue and
# compute resource names of at most 25 characters. kiln names a queue's one compute resource "<queue>-nodes".
PARALLELCLUSTER_MAX_QUEUES = 50
PARALLELCLUSTER_NAME_MAX = 25
PARALLELCLUSTER_COMPUTE_RESOURCE_SUFFIX = "-nodes"
PARALLELCLUSTER_QUEUE_NAME_MAX = PARALLELCLUSTER_NAME_MAX - len(PARALLELCLUSTER_COMPUTE_RESOURCE_SUFFIX)

# Tags (AWS tagging rules, shared by every service kiln tags): 50 user tags per resource, keys 1-128 and
# values 0-256 Unicode characters; the reserved key prefixes are data (services.ec2 reserved_tag_prefixes).
MAX_TAGS_PER_RESOURCE = 50
TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256
# The most tags (outside aws:, which AWS does not count) one resource carries beside the spec's: a ParallelCluster
# node's instance, with ParallelCluster's own (platforms.json, parallelcluster.instance_tags) and kiln's own, up to
# four in a short-lived environment (kiln:cluster, kiln:environment, kiln:part, kiln:ttl-hours). Others carry fewer:
# a subnet kiln's, Name, aws-cdk:subnet-name, aws-cdk:subnet-type and, with EKS, kubernetes.io/role/(internal-)elb;
# an EKS node kiln's (the system group's kiln:eks-cluster and kiln:node-group besides) and EKS's own (eks:*, and the
# autoscaler's discovery and kubernetes.io/cluster/ tags, five at most).
PARALLELCLUSTER_INSTANCE_TAGS = 10
KILN_OWN_TAGS_MAX = 4
KILN_ADDED_TAGS_MAX = PARALLELCLUSTER_INSTANCE_TAGS + KILN_OWN_TAGS_MAX
# ParallelCluster 3.16.1 refuses a configuration whose Tags hold more than 40 keys (pcluster/constants.py
# MAX_TAGS_COUNT, validators/tags_validators.py ComputeResourceTagsValidator), counted as its provider passes them:
# kiln's own, the spec's, and its one parallelcluster:custom_resource (cloudformation/custom_resource/cluster.yaml).
PARALLELCLUSTER_MAX_CONFIG_TAGS = 40
PARALLELCLUSTER_PROVIDER_TAGS = 1
MAX_SPEC_TAGS = min(
    MAX_TAGS_PER_RESOURCE - KILN_ADDED_TAGS_MAX,
    PARALLELCLUSTER_MAX_CONFIG_TAGS - KILN_OWN_TAGS_MAX - PARALLELCLUSTER_PROVIDER_TAGS,
)

# FSx for Lustre (PERSISTENT_2 and SCRATCH_2): 1,200 GiB, or a multiple of 2,400 GiB; PERSISTENT_2 throughput
# 125, 250, 500 or 1,000 MB/s per TiB (default 250); automatic backups kept 0-90 days.
LUSTRE_MIN_STORAGE_GIB = 1200
LUSTRE_STORAGE_STEP_GIB = 2400
PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)
PERSISTENT_2_DEFAULT_THROUGHPUT = 250
LUSTRE_BACKUP_RETENTION_MAX_DAYS = 90

# VPC: AWS allows /16 to /28; kiln splits a VPC into /(n+4) public and /(n+2) private subnets in two AZs,
# which needs at least a /22.
VPC_PREFIX_MIN = 16
VPC_PREFIX_MAX = 22
# A VPC's IPv4 CIDR block (an existing VPC's too): "The allowed block size is between a /16 netmask (65,536 IP
# addresses) and /28 netmask (16 IP addresses)", https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html
AWS_VPC_PREFIX_MIN = 16
AWS_VPC_PREFIX_MAX = 28
# The ranges kiln takes for a VPC: the RFC 1918 private ranges AWS recommends ("When you create a VPC, we recommend
# that you specify a CIDR block from the private IPv4 address ranges as specified in RFC 1918",
# https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html), and 100.64.0.0/10 (RFC 6598 shared address
# space), which VPCs take: EC2's CreateVpc reference gives 100.68.0.0/18 as its example of a VPC's CidrBlock
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateVpc.html). AWS also takes publicly routable
# blocks (same vpc-cidr-blocks page); kiln does not, as a training cluster's private subnets have no use for them.
# Not Python's is_private, which also takes link-local 169.254/16, loopback 127/8, 0/8 and reserved 240/4 and refuses
# 100.64/10.
VPC_RANGES = tuple(
    ipaddress.IPv4Network(cidr) for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
VPC_RANGES_RULE = "a range inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918) or 100.64.0.0/10 (RFC 6598)"
PUBLIC_SUBNET_EXTRA_BITS = 4
PRIVATE_SUBNET_EXTRA_BITS = 2
# EC2 keeps 5 addresses of every subnet (network, router, DNS, future use, broadcast).
SUBNET_RESERVED_ADDRESSES = 5
# The CPU node group kiln adds to an EKS cluster for cluster services: a node loss leaves the services up.
EKS_SYSTEM_NODE_TYPE = "m5.xlarge"
EKS_SYSTEM_NODE_COUNT = 2
# Docker's default bridge network: a node that runs Docker with it cannot reach VPC addresses inside it.
DOCKER_DEFAULT_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")

# IMDSv2 PUT response hop limit (EC2 ModifyInstanceMetadataOptions: 1-64).
IMDS_HOP_LIMIT_MIN = 1
IMDS_HOP_LIMIT_MAX = 64

# AWS APIs take counts and sizes as 32-bit signed integers: the ceiling of every count kiln passes on.
INT32_MAX = 2**31 - 1
# FSx for Lustre DataRepositoryPath (CreateDataRepositoryAssociation): at most 4,357 characters.
S3_URI_MAX = 4357

# kiln's own: the user's bootstrap steps (spec bootstrap.steps). At most 16 steps of at most 256 KiB each: a node's
# setup is a few scripts, not a software distribution (that belongs in a package or an image), and 16 full scripts
# (4 MiB) are as much as the rendered bundle holds (kiln.bootstrap.render.MAX_RENDERED_BYTES counts them with the rest).
USER_STEPS_MAX = 16
USER_STEP_MAX_BYTES = 256 * 1024

# kiln's own: a CI environment deletes itself at most 30 days after deploy, and no sooner than 30 minutes. Its reaper
# is scheduled at deploy + TTL and deployed first, while the network, storage and compute stacks that follow take tens
# of minutes (`kiln ci up` prints each stack's time); a shorter TTL would start deleting the environment while it is
# still being deployed, and a tiny one (1e-300) schedules the reaper at synthesis. The spec rule and
# kiln.stacks.ci_mode.ci_environment (`kiln ci up --ttl`) hold a TTL to these bounds through ttl_problem.
MIN_TTL_HOURS = 0.5
MAX_TTL_HOURS = 24 * 30

# The spec's resilience section (kiln's own bounds; the spec rule and kiln.bootstrap.config share them). The health
# check's interval: Slurm kills a HealthCheckProgram after 60 s (https://slurm.schedmd.com/slurm.conf.html), so a
# shorter interval would start a check before the last one may end; an hour at most, or a bad node takes jobs too long.
HEALTH_CHECK_INTERVAL_S = (60, 3600)
# How many median step times without progress kiln-launch calls a hang (2: one slow step is no hang), and the
# shortest such stall in seconds (10 s to a day: a checkpoint save or an evaluation pass runs between steps).
HANG_FACTOR = (2, 1000)
HANG_MIN_S = (10, 86400)
TTL_RULE = f"from {MIN_TTL_HOURS:g} (30 minutes: a deploy takes longer) to {MAX_TTL_HOURS} hours (30 days)"


def ttl_problem(hours: float) -> str | None:
    """Return why HOURS is no TTL for a short-lived environment (one line), or None when it is one."""
    if hours > MAX_TTL_HOURS:
        return f"must be at most {MAX_TTL_HOURS} hours (30 days) (got {hours:g})"
    if not hours >= MIN_TTL_HOURS:  # NaN too
        return (
            f"must be at least {MIN_TTL_HOURS:g} hours (30 minutes) (got {hours:g}): the reaper is scheduled at deploy "
            "+ TTL, and a shorter one would delete the environment while it is still being deployed"
        )
    return None


def is_vpc_range(cidr: ipaddress.IPv4Network) -> bool:
    """Return True when CIDR lies inside one of the VPC_RANGES."""
    return any(cidr.subnet_of(allowed) for allowed in VPC_RANGES)


def in_range(value: object, low: int, high: int) -> bool:
    """Return True when VALUE is an integer (not a bool) from LOW to HIGH inclusive."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def is_lustre_storage(gib: object) -> bool:
    """Return True when GIB is a size FSx for Lustre creates: 1200, or a positive multiple of 2400."""
    if not in_range(gib, 1, INT32_MAX):
        return False
    return gib == LUSTRE_MIN_STORAGE_GIB or gib % LUSTRE_STORAGE_STEP_GIB == 0
