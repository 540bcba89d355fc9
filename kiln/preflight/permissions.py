"""The IAM actions `kiln preflight` needs: read-only, one place for the CI role, its review and the tests."""

from __future__ import annotations

# Read-only calls that IAM cannot scope to a resource, so a role grants them on "*".
UNSCOPED_READS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeSubnets",
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
# The bootstrap check lists the policies attached to the CDK bootstrap's CloudFormation execution role.
BOOTSTRAP_READS = ("iam:ListAttachedRolePolicies",)
# The qualifier `cdk bootstrap` uses unless given --qualifier; its roles are cdk-<qualifier>-<kind>-<account>-<region>.
DEFAULT_CDK_QUALIFIER = "hnb659fds"
