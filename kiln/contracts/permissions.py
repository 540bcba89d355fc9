"""The IAM actions `kiln preflight` needs: read-only, one place for the CI role, its review and the tests."""

from __future__ import annotations

# Read-only calls that IAM cannot scope to a resource, so a role grants them on "*".
UNSCOPED_READS = (
    "ec2:DescribeAddresses",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeVpcs",
    "fsx:DescribeFileSystems",
    "servicequotas:GetAWSDefaultServiceQuota",
    "servicequotas:GetServiceQuota",
    "servicequotas:ListAWSDefaultServiceQuotas",
    "servicequotas:ListServiceQuotas",
)
# AWS's public parameters of the services each region offers (ssm:GetParameters), in any region.
GLOBAL_INFRASTRUCTURE_PARAMETERS = "parameter/aws/service/global-infrastructure/*"
PARAMETER_READS = ("ssm:GetParameters",)
# The bucket check reads a bucket by name: HeadBucket (s3:ListBucket) and its tags.
BUCKET_READS = ("s3:GetBucketTagging", "s3:ListBucket")
# The bucket and leftovers checks ask whether the cluster's stacks (and a bucket's) still exist, and what they hold:
# the cluster's own stacks, <name>-<part>.
STACK_READS = ("cloudformation:DescribeStacks", "cloudformation:ListStackResources")
# The leftovers check finds what an earlier deploy kept by kiln's tags and describes it. Advisory (a refusal is a
# WARN): the tagging API and AMP's listing take no resource scope; the rest read the kept resources themselves.
LEFTOVER_READS = (
    "aps:ListWorkspaces",
    "fsx:DescribeBackups",
    "kms:DescribeKey",
    "s3:GetBucketLogging",
    "tag:GetResources",
)
# The bootstrap check lists the policies attached to the CDK bootstrap's CloudFormation execution role.
BOOTSTRAP_READS = ("iam:ListAttachedRolePolicies",)
