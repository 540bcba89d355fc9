"""Nodes run only code they can verify (issue 44): in every example's synthesized templates, the PCS and EKS launch
templates hand fetch.sh the digest of the very bundle the assembly ships; ParallelCluster's OnNodeConfigured Script
is an object of the cluster's own bucket that the stack's deployment writes, not one of CDK's asset bucket; and no
role in the stack but that deployment's may write what ParallelCluster or HyperPod runs unchecked."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kiln.bootstrap.fetch import RESOLVE_SCRIPT, bundle_digest, file_sha256
from kiln.constructs.node_scripts import DENY_SID
from kiln.constructs.parallelcluster import BOOTSTRAP_PREFIX, RESOLVE_SCRIPT_NAME

# fetch.sh's arguments in the user data: the bundle's URL (an asset key, <hash>.zip), its entry point and digest.
FETCH_ARGUMENTS = re.compile(r"/([0-9a-f]{64})\.zip' '([\w.-]+)' '--sha256' '([0-9a-f]{64})'")


def _text(value: Any) -> str:
    """The literal parts of a template value (Fn::Join pieces, Fn::Base64, Fn::Sub) as one string."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "".join(_text(v) for v in value.values())
    return ""


def _user_data_arguments(template: dict) -> list[tuple[str, str, str]]:
    found = []
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::EC2::LaunchTemplate":
            user_data = resource["Properties"]["LaunchTemplateData"].get("UserData")
            if user_data is not None and "/opt/kiln/fetch.sh" in _text(user_data):
                found += FETCH_ARGUMENTS.findall(_text(user_data))
    return found


@pytest.mark.parametrize(
    ("example", "stack", "entry_point"),
    [
        ("p5-pcs", "llm-pcs-compute", "pcs-user-data.sh"),
        ("p5-eks", "llm-eks-compute", "eks-user-data.sh"),
    ],
)
def test_launch_templates_carry_the_digest_of_the_bundle_the_assembly_ships(
    example_assemblies, example: str, stack: str, entry_point: str
) -> None:
    assembly = example_assemblies[example]
    assert assembly.returncode == 0, assembly.stderr
    arguments = _user_data_arguments(assembly.templates()[stack])
    assert arguments, "every kiln node's user data runs fetch.sh"
    for asset, entry, digest in arguments:
        assert entry == entry_point
        # The rendered bundle as the assembly stages it for upload: what the zip in S3 holds.
        assert digest == bundle_digest(assembly.outdir / f"asset.{asset}")


def test_parallelclusters_on_node_configured_script_is_in_the_clusters_own_bucket_written_by_the_deploy(
    example_assemblies,
) -> None:
    """ParallelCluster runs the Script unchecked: every node's is resolve-bootstrap.sh in a bucket of the stack's own,
    which the stack's BucketDeployment fills from the script as kiln ships it; CDK's asset bucket holds none."""
    assembly = example_assemblies["p5-parallelcluster"]
    template = assembly.templates()["llm-pcluster-compute"]
    resources = template["Resources"]
    (config,) = [
        r["Properties"]["ClusterConfiguration"] for r in resources.values() if r["Type"] == "Custom::PclusterCluster"
    ]
    nodes = [config["HeadNode"], *config["LoginNodes"]["Pools"], *config["Scheduling"]["SlurmQueues"]]
    scripts = [node["CustomActions"]["OnNodeConfigured"]["Script"] for node in nodes]
    key = f"{BOOTSTRAP_PREFIX}{RESOLVE_SCRIPT_NAME}"
    assert f"resolve-bootstrap-{file_sha256(RESOLVE_SCRIPT)}.sh" == RESOLVE_SCRIPT_NAME
    ((bucket,),) = {tuple(s["Fn::Join"][1][1].values()) for s in scripts}
    assert all(s == {"Fn::Join": ["", ["s3://", {"Ref": bucket}, f"/{key}"]]} for s in scripts), scripts
    assert resources[bucket]["Type"] == "AWS::S3::Bucket"
    assert "cdk-hnb659fds-assets" not in json.dumps(scripts)
    (deployment,) = [r["Properties"] for r in resources.values() if r["Type"] == "Custom::CDKBucketDeployment"]
    assert deployment["DestinationBucketName"] == {"Ref": bucket}
    assert deployment["DestinationBucketKeyPrefix"] == BOOTSTRAP_PREFIX
    (source,) = deployment["SourceObjectKeys"]
    staged = assembly.outdir / f"asset.{source.removesuffix('.zip')}"
    assert [p.name for p in staged.iterdir()] == [RESOLVE_SCRIPT_NAME]
    assert (staged / RESOLVE_SCRIPT_NAME).read_bytes() == RESOLVE_SCRIPT.read_bytes()
    _only_the_deployment_writes(resources, bucket, BOOTSTRAP_PREFIX)


def _only_the_deployment_writes(resources: dict, bucket: str, prefix: str) -> None:
    """Hold that the one role in the stack allowed to write BUCKET (a logical id) is CDK's BucketDeployment
    handler's, and that the bucket's policy refuses writes under PREFIX to every other principal: whoever could
    rewrite what a platform runs unchecked would be root on every node."""
    writers = set()
    for policy in resources.values():
        if policy["Type"] != "AWS::IAM::Policy":
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            writes = {"s3:PutObject", "s3:Put*", "s3:*", "*"} & set(actions)
            if writes and bucket in json.dumps(statement.get("Resource")):
                writers |= {role["Ref"] for role in policy["Properties"]["Roles"]}
    (handler,) = writers
    # CDK's BucketDeployment handler: the function every Custom::CDKBucketDeployment of the stack calls runs as it.
    deployments = [r["Properties"] for r in resources.values() if r["Type"] == "Custom::CDKBucketDeployment"]
    (function,) = {d["ServiceToken"]["Fn::GetAtt"][0] for d in deployments}
    assert resources[function]["Properties"]["Role"] == {"Fn::GetAtt": [handler, "Arn"]}
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for r in resources.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    denials = [s for s in policy["Statement"] if s["Effect"] == "Deny" and s["Action"] == "s3:PutObject"]
    assert denials == [
        {
            "Sid": DENY_SID,
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "s3:PutObject",
            "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{prefix}*"]]},
            "Condition": {"ArnNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": [handler, "Arn"]}}},
        }
    ]


def test_hyperpods_lifecycle_scripts_are_written_by_the_stacks_deployment_alone(example_assemblies) -> None:
    """HyperPod runs its lifecycle scripts from the cluster's lifecycle bucket: the deployment is its one writer."""
    template = example_assemblies["p5-hyperpod-slurm"].templates()["llm-hp-slurm-compute"]
    resources = template["Resources"]
    (cluster,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster"]
    uri = cluster["InstanceGroups"][0]["LifeCycleConfig"]["SourceS3Uri"]
    (bucket,) = [part["Ref"] for part in uri["Fn::Join"][1] if isinstance(part, dict) and "Ref" in part]
    (deployment,) = [r["Properties"] for r in resources.values() if r["Type"] == "Custom::CDKBucketDeployment"]
    assert deployment["DestinationBucketName"] == {"Ref": bucket}
    _only_the_deployment_writes(resources, bucket, deployment["DestinationBucketKeyPrefix"])
