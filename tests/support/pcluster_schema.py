"""Load a ParallelCluster config with the official aws-parallelcluster schema, tokens made concrete."""

from __future__ import annotations

import os
from typing import Any

# Every config field kiln fills with a deploy-time value, and a well-formed literal of its kind.
CONCRETE = {
    "Region": "us-east-1",
    "SubnetId": "subnet-0123456789abcdef0",
    "SubnetIds": "subnet-0123456789abcdef0",
    "AdditionalSecurityGroups": "sg-0123456789abcdef0",
    "FileSystemId": "fs-0123456789abcdef0",
    "Script": "s3://cdk-assets-bucket/fetch.sh",
    "Args": "s3://cdk-assets-bucket/bundle.zip",
    "BucketName": "cdk-assets-bucket",
    "KeyName": "bundle.zip",
    "Policy": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    "AllowedIps": "10.0.0.0/16",
}


def is_intrinsic(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))


def concrete(value: Any, key: str | None = None) -> Any:
    """Replace CloudFormation intrinsics under known keys with literals; fail on any other."""
    if is_intrinsic(value):
        if key not in CONCRETE:
            raise AssertionError(f"{key}: holds a deploy-time value the schema test does not know: {value}")
        return CONCRETE[key]
    if isinstance(value, dict):
        return {k: concrete(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [concrete(v, key) for v in value]
    return value


def load_with_official_schema(config: dict, cluster_name: str) -> Any:
    """Return the ClusterConfig the official schema builds from CONFIG (raises on any schema error)."""
    from pcluster.schemas.cluster_schema import ClusterSchema

    # Loading looks up capacity reservations with boto3 (moto lacks that call). Without credentials and
    # with every endpoint on a closed loopback port the lookup fails here, which the schema tolerates.
    isolated = {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_CONFIG_FILE": os.devnull,
    }
    saved = {
        name: os.environ.get(name)
        for name in [*isolated, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
    }
    os.environ.update(isolated)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    try:
        return ClusterSchema(cluster_name=cluster_name).load(config)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
