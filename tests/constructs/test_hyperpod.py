"""HyperPodCluster: instance groups, lifecycle scripts in S3, execution role, recovery, orchestrator."""

from __future__ import annotations

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match, Template

from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from tests.support.constructs import get_att, imported_vpc, logical_id, plain_bootstrap, ref, stack
from tests.support.hyperpod import _eks_hyperpod

EKS_CLUSTER_SECURITY_GROUP = "sg-0123456789abcdef0"


@pytest.fixture(scope="module")
def slurm():
    st = stack("HyperPodSlurm")
    vpc = imported_vpc(st)
    efa = ec2.SecurityGroup(st, "Efa", vpc=vpc)
    props = HyperPodClusterProps(
        cluster_name="llm-hp-slurm",
        vpc=vpc,
        subnet=vpc.private_subnets[0],
        security_groups=[efa],
        instance_groups=[
            HyperPodInstanceGroup(name="controller", instance_type="m5.8xlarge", count=1, role="controller"),
            HyperPodInstanceGroup(name="login", instance_type="m5.2xlarge", count=1, role="login"),
            HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2, storage_gib=1000),
        ],
        lifecycle=plain_bootstrap(st, "on_create.sh"),
        cluster_env={"KILN_CLUSTER_NAME": "llm-hp-slurm", "KILN_REGION": "us-east-1"},
        provisioning_parameters={"version": "1.0.0", "workload_manager": "slurm", "controller_group": "controller"},
    )
    cluster = HyperPodCluster(st, "Cluster", props)
    return {"props": props, "cluster": cluster, "efa": efa, "template": Template.from_stack(st)}


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


def test_deploys_print_where_nodes_read_their_lifecycle_scripts(slurm) -> None:
    cluster = slurm["cluster"]
    outputs = slurm["template"].find_outputs("*")
    (entry,) = [o for key, o in outputs.items() if key.startswith("ClusterLifecycleEntryPoint")]
    bucket = ref(cluster.lifecycle_bucket.node.default_child)
    assert entry["Value"] == {"Fn::Join": ["", ["s3://", bucket, "/hyperpod/llm-hp-slurm/lifecycle/on_create.sh"]]}
    assert "running nodes keep the ones they booted with until UpdateClusterSoftware" in entry["Description"]


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


def _on_imported_eks(name: str) -> tuple[Stack, eks.ICluster, HyperPodCluster, Template]:
    """Return a stack NAME with a HyperPod cluster orchestrated by an imported EKS cluster, and its template."""
    st = stack(name)
    imported = eks.Cluster.from_cluster_attributes(
        st, "Eks", cluster_name="llm-hp-eks", cluster_security_group_id=EKS_CLUSTER_SECURITY_GROUP
    )
    hyperpod = _eks_hyperpod(st, imported)
    return st, imported, hyperpod, Template.from_stack(st)


def test_eks_orchestrator_points_at_the_eks_cluster_and_nodes_join_its_security_group() -> None:
    st, imported, hyperpod, template = _on_imported_eks("HyperPodEks")
    template.has_resource_properties(
        "AWS::SageMaker::Cluster",
        {
            "Orchestrator": {"Eks": {"ClusterArn": st.resolve(imported.cluster_arn)}},
            "InstanceGroups": [
                Match.object_like({"LifeCycleConfig": Match.object_like({"OnCreate": "eks-user-data.sh"})})
            ],
        },
    )
    (cluster,) = template.find_resources("AWS::SageMaker::Cluster").values()
    assert cluster["Properties"]["VpcConfig"]["SecurityGroupIds"] == [
        get_att(hyperpod.security_group.node.default_child, "GroupId"),
        EKS_CLUSTER_SECURITY_GROUP,
    ]


def test_an_imported_eks_cluster_without_its_security_group_is_refused() -> None:
    st = stack("HyperPodEksNoGroup")
    imported = eks.Cluster.from_cluster_attributes(st, "Eks", cluster_name="llm-hp-eks")
    with pytest.raises(ValueError, match="eks_cluster: got a cluster without its security group"):
        _eks_hyperpod(st, imported)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"orchestrator": "eks"}, "roles: got"),
        ({"eks_cluster": object()}, "eks_cluster: got .*; allowed: none for orchestrator slurm"),
        (
            {"instance_groups": [HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2)]},
            "controller groups: got 0",
        ),
        ({"orchestrator": "kubernetes"}, "orchestrator: got 'kubernetes'; allowed: slurm, eks"),
    ],
)
def test_invalid_props_are_refused(slurm, change: dict, message: str) -> None:
    base = slurm["props"]
    kwargs = {f: getattr(base, f) for f in base.__dataclass_fields__} | change
    with pytest.raises(ValueError, match=message):
        HyperPodClusterProps(**kwargs)


def test_types_hyperpod_does_not_offer_are_refused() -> None:
    with pytest.raises(ValueError, match="instance_type: got 'c7i.xlarge'; allowed: a type HyperPod offers"):
        HyperPodInstanceGroup(name="cpu", instance_type="c7i.xlarge", count=1)


def test_execution_role_may_change_only_interfaces_of_the_compute_subnet(slurm) -> None:
    cluster, template = slurm["cluster"], slurm["template"]
    (policy,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [ref(cluster.role.node.default_child)]
    ]
    ec2_statements = [s for s in policy["PolicyDocument"]["Statement"] if "ec2:" in str(s["Action"])]
    on_everything = [s for s in ec2_statements if s["Resource"] == "*"]
    assert len(on_everything) == 1
    assert all(a.startswith("ec2:Describe") for a in on_everything[0]["Action"])
    by_action = {a: s for s in ec2_statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    for action in ("ec2:DeleteNetworkInterface", "ec2:DetachNetworkInterface", "ec2:AssignPrivateIpAddresses"):
        assert "ec2:Subnet" in by_action[action]["Condition"]["ArnEquals"]
        assert "subnet-0123456789abcdef0" in str(by_action[action]["Condition"])
    assert "ec2:Vpc" in by_action["ec2:CreateNetworkInterface"]["Condition"]["ArnEquals"]
    assert by_action["ec2:CreateTags"]["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}}


def test_lifecycle_bucket_logs_under_its_own_name(slurm) -> None:
    buckets = slurm["template"].find_resources("AWS::S3::Bucket")
    prefixes = [
        b["Properties"]["LoggingConfiguration"]["LogFilePrefix"]
        for b in buckets.values()
        if "LoggingConfiguration" in b["Properties"]
    ]
    assert prefixes == ["lifecycle-bucket/"]


def _role_statements(template: Template, role) -> list[dict]:
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if policy["Properties"]["Roles"] == [ref(role.node.default_child)]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_sagemaker_may_assume_the_execution_role_for_this_accounts_clusters_only(slurm) -> None:
    """HyperPod's references set no trust condition and no page says HyperPod sends the keys (platforms.json): kiln
    refuses a call naming another account or resource, and cannot break one that names none."""
    (role,) = [
        r
        for r in slurm["template"].find_resources("AWS::IAM::Role").values()
        if "sagemaker.amazonaws.com" in str(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    conditions = statement["Condition"]
    # The test stacks deploy to account 111111111111 in us-east-1.
    assert conditions["StringEqualsIfExists"] == {"aws:SourceAccount": "111111111111"}
    assert conditions["ArnLikeIfExists"] == {"aws:SourceArn": "arn:aws:sagemaker:us-east-1:111111111111:cluster/*"}


def test_eks_nodes_may_pull_images_from_ecr_and_are_labelled_like_kilns_groups() -> None:
    _, _, hyperpod, template = _on_imported_eks("HyperPodEksEcr")
    statements = _role_statements(template, hyperpod.role)
    by_action = {a: s for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert by_action["ecr:GetAuthorizationToken"]["Resource"] == "*"
    # Image reads only, from any region's registry (tests/constructs/test_eks_image_pulls.py: every image pulls).
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"):
        assert by_action[action]["Resource"] == "arn:aws:ecr:*:*:repository/*"
    # The Slurm cluster's role pulls nothing from ECR.
    [(labels)] = [g["KubernetesConfig"]["Labels"] for g in _groups({"template": template}).values()]
    assert labels == {"kiln.io/node-group": "p5", "nvidia.com/gpu.present": "true"}


def test_slurm_groups_get_no_kubernetes_labels_and_no_ecr_grant(slurm) -> None:
    assert all("KubernetesConfig" not in g for g in _groups(slurm).values())
    statements = _role_statements(slurm["template"], slurm["cluster"].role)
    assert not [s for s in statements if "ecr:" in str(s["Action"])]
