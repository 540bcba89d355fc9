"""The tag keys kiln puts on what it creates, and finds it by again: the stacks, the constructs, `kiln ci`, `kiln ami`,
`kiln connect` and preflight read them here. A key is part of what a deployed resource promises: renaming one loses
every resource tagged before."""

from __future__ import annotations

# kiln's namespace: spec tags may not take or shadow it.
KILN_TAG_PREFIX = "kiln:"

# Every resource of a cluster's stacks.
TAG_CLUSTER = "kiln:cluster"
# A CI environment's stacks and buckets: the environment, its time to live, and which part of it a stack is.
TAG_ENVIRONMENT = "kiln:environment"
TAG_TTL_HOURS = "kiln:ttl-hours"
TAG_PART = "kiln:part"
# The CI identity stack's role, by repository.
TAG_CI_IDENTITY = "kiln:ci-identity"

# Every AMI kiln bakes, besides the spec's own tags: what it was baked for.
TAG_TARGET = "kiln:target"
TAG_OS = "kiln:os"
TAG_ARCHITECTURE = "kiln:architecture"
# The digest of what the install steps got (scripts and pins): the same digest means the same image contents.
TAG_RECIPE = "kiln:recipe"
# One tag per pinned version an install step recorded: kiln:pin:<variable without KILN_, lowercase>.
TAG_PIN_PREFIX = "kiln:pin:"

# The EKS system node group's instances (its name is kiln.contracts.backends.EKS_SYSTEM_NODE_GROUP): `kiln ci run`
# and `kiln connect` find a running system node by them and forward the cluster's private API endpoint through it.
TAG_EKS_CLUSTER = "kiln:eks-cluster"
TAG_NODE_GROUP = "kiln:node-group"
