"""HyperPodCluster: instance groups, lifecycle scripts in S3, execution role, recovery, orchestrator."""

from __future__ import annotations

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from kiln.bootstrap.config import config_from_spec
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from kiln.spec import load_spec
from kiln.stacks import build_cluster, new_app
from tests.conftest import ROOT
from tests.constructs.conftest import get_att, imported_vpc, logical_id, ref, stack

EKS_ARN = "arn:aws:eks:us-east-1:111111111111:cluster/llm-hp-eks"


@pytest.fixture(scope="module")
def slurm():
    st = stack("HyperPodSlurm")
    vpc = imported_vpc(st)
    efa = ec2.SecurityGroup(st, "Efa", vpc=vpc)
    spec = load_spec(ROOT / "examples" / "p5-hyperpod-slurm.yaml")
    cluster = HyperPodCluster(
        st,
        "Cluster",
        HyperPodClusterProps(
            cluster_name="llm-hp-slurm",
            vpc=vpc,
            subnet=vpc.private_subnets[0],
            security_groups=[efa],
            instance_groups=[
                HyperPodInstanceGroup(name="controller", instance_type="m5.8xlarge", count=1, role="controller"),
                HyperPodInstanceGroup(name="login", instance_type="m5.2xlarge", count=1, role="login"),
                HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2, storage_gib=1000),
            ],
            lifecycle=config_from_spec(spec),
            cluster_env={"KILN_CLUSTER_NAME": "llm-hp-slurm", "KILN_REGION": "us-east-1"},
            provisioning_parameters={"version": "1.0.0", "workload_manager": "slurm", "controller_group": "controller"},
        ),
    )
    return {"cluster": cluster, "efa": efa, "template": Template.from_stack(st)}


def _groups(fixture) -> dict[str, dict]:
    (cluster,) = fixture["template"].find_resources("AWS::SageMaker::Cluster").values()
    return {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}


def test_groups_use_ml_names_counts_and_the_execution_role(slurm) -> None:
    groups = _groups(slurm)
    assert {n: (g["InstanceType"], g["InstanceCount"]) for n, g in groups.items()} == {
        "controller": ("ml.m5.8xlarge", 1),
        "login": ("ml.m5.2xlarge", 1),
        "p5": ("ml.p5.48xlarge", 2),
    }
    role = get_att(slurm["cluster"].role.node.default_child, "Arn")
    assert all(g["ExecutionRole"] == role for g in groups.values())


def test_gpu_groups_get_deep_health_checks_one_thread_per_core_and_storage(slurm) -> None:
    groups = _groups(slurm)
    assert groups["p5"]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert groups["p5"]["ThreadsPerCore"] == 1
    assert groups["p5"]["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 1000}}]
    assert "OnStartDeepHealthChecks" not in groups["controller"] and "ThreadsPerCore" not in groups["controller"]


def test_lifecycle_config_points_at_the_hyperpod_bundle(slurm) -> None:
    cluster = slurm["cluster"]
    bucket = ref(cluster.lifecycle_bucket.node.default_child)
    for group in _groups(slurm).values():
        assert group["LifeCycleConfig"] == {
            "SourceS3Uri": {"Fn::Join": ["", ["s3://", bucket, "/hyperpod/llm-hp-slurm/lifecycle/"]]},
            "OnCreate": "on_create.sh",
        }
    slurm["template"].has_resource_properties(
        "Custom::CDKBucketDeployment",
        {
            "DestinationBucketName": bucket,
            "DestinationBucketKeyPrefix": "hyperpod/llm-hp-slurm/lifecycle/",
            "Prune": True,
        },
    )
    (deployment,) = slurm["template"].find_resources("Custom::CDKBucketDeployment").values()
    assert len(deployment["Properties"]["SourceObjectKeys"]) == 3, "bundle, cluster.env, provisioning_parameters.json"


def test_scripts_are_deployed_before_the_cluster(slurm) -> None:
    (cluster,) = slurm["template"].find_resources("AWS::SageMaker::Cluster").values()
    deployments = slurm["template"].find_resources("Custom::CDKBucketDeployment")
    assert set(deployments) <= set(cluster["DependsOn"])


def test_recovery_vpc_and_no_orchestrator_block_for_slurm(slurm) -> None:
    (cluster,) = slurm["template"].find_resources("AWS::SageMaker::Cluster").values()
    props = cluster["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    assert props["VpcConfig"] == {
        "Subnets": ["subnet-0123456789abcdef0"],
        "SecurityGroupIds": [
            get_att(slurm["cluster"].security_group.node.default_child, "GroupId"),
            get_att(slurm["efa"].node.default_child, "GroupId"),
        ],
    }
    assert "Orchestrator" not in props


def test_execution_role_reads_only_the_lifecycle_prefix(slurm) -> None:
    cluster = slurm["cluster"]
    template = slurm["template"]
    role = template.find_resources("AWS::IAM::Role")[logical_id(cluster.role.node.default_child)]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "AmazonSageMakerClusterInstanceRolePolicy" in str(role["ManagedPolicyArns"])
    (policy,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [ref(cluster.role.node.default_child)]
    ]
    s3 = [s for s in policy["PolicyDocument"]["Statement"] if str(s["Action"]).startswith("s3:")]
    bucket = get_att(cluster.lifecycle_bucket.node.default_child, "Arn")
    assert s3 == [
        {
            "Action": "s3:GetObject",
            "Effect": "Allow",
            "Resource": {"Fn::Join": ["", [bucket, "/hyperpod/llm-hp-slurm/lifecycle/*"]]},
        },
        {
            "Action": "s3:ListBucket",
            "Effect": "Allow",
            "Resource": bucket,
            "Condition": {"StringLike": {"s3:prefix": ["hyperpod/llm-hp-slurm/lifecycle/*"]}},
        },
    ]


def test_eks_orchestrator_points_at_the_eks_cluster() -> None:
    st = stack("HyperPodEks")
    vpc = imported_vpc(st)
    spec = load_spec(ROOT / "examples" / "p5-hyperpod-eks.yaml")
    HyperPodCluster(
        st,
        "Cluster",
        HyperPodClusterProps(
            cluster_name="llm-hp-eks",
            vpc=vpc,
            subnet=vpc.private_subnets[0],
            instance_groups=[HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2)],
            lifecycle=config_from_spec(spec),
            cluster_env={"KILN_CLUSTER_NAME": "llm-hp-eks", "KILN_REGION": "us-east-1"},
            orchestrator="eks",
            eks_cluster_arn=EKS_ARN,
        ),
    )
    template = Template.from_stack(st)
    template.has_resource_properties(
        "AWS::SageMaker::Cluster",
        {
            "Orchestrator": {"Eks": {"ClusterArn": EKS_ARN}},
            "InstanceGroups": [
                Match.object_like({"LifeCycleConfig": Match.object_like({"OnCreate": "eks-user-data.sh"})})
            ],
        },
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"orchestrator": "eks"}, "roles: got"),
        (
            {"instance_groups": [HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2)]},
            "controller groups: got 0",
        ),
        ({"orchestrator": "kubernetes"}, "orchestrator: got 'kubernetes'; allowed: slurm, eks"),
    ],
)
def test_invalid_props_are_refused(slurm, change: dict, message: str) -> None:
    base = slurm["cluster"].props
    kwargs = {f: getattr(base, f) for f in base.__dataclass_fields__} | change
    with pytest.raises(ValueError, match=message):
        HyperPodClusterProps(**kwargs)


def test_types_hyperpod_does_not_offer_are_refused() -> None:
    with pytest.raises(ValueError, match="instance_type: got 'c7i.xlarge'; allowed: a type HyperPod offers"):
        HyperPodInstanceGroup(name="cpu", instance_type="c7i.xlarge", count=1)


def test_stack_derives_provisioning_parameters_from_the_spec() -> None:
    stacks = build_cluster(new_app(), load_spec(ROOT / "examples" / "p5-hyperpod-slurm.yaml"), nag=False)
    parameters = Stack.of(stacks.compute).resolve(
        stacks.compute._provisioning_parameters(stacks.compute._hyperpod_groups())
    )
    assert parameters["controller_group"] == "controller" and parameters["login_group"] == "login"
    assert parameters["worker_groups"] == [{"instance_group_name": "p5", "partition_name": "p5"}]
    assert set(parameters) >= {"fsx_dns_name", "fsx_mountname"}
