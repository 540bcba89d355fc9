"""EksTrainingCluster: EKS, single-AZ EFA GPU node groups, pinned add-ons, FSx PV/PVC, lint and cdk-nag.

Neuron node groups and add-ons: test_eks_neuron.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from kiln.catalog.platforms import service_fact
from kiln.constructs import (
    LustreFileSystemAttributes,
    acknowledgements,
)
from kiln.constructs.eks import KUBECTL_ECR_POLICIES, EksTrainingCluster
from kiln.constructs.eks_addons import (
    HELM_ADDONS,
    HYPERPOD_DEPENDENCIES,
    KUBERNETES_RELEASES,
    TRAINING_OPERATOR,
)
from kiln.constructs.eks_install import (
    INSTALL_DEADLINE_SECONDS,
    INSTALL_TOKEN_SECONDS,
    INSTALL_WAIT_MINUTES,
    JOB_FINISHED_PATH,
    SERVICE_ACCOUNT_DIR,
    install_tools,
    kustomize_job_manifests,
    run_checked,
)
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup, SystemNodeGroup
from kiln.constructs.eks_props import EksTrainingClusterProps, LustreVolume
from kiln.constructs.neuron_addons import NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER
from kiln.stacks.app import new_app
from kiln.stacks.synth import lint_template, nag_report
from tests.support.constructs import (
    ENV,
    PLAIN_BUNDLE_SHA256,
    get_att,
    imported_vpc,
    logical_id,
    policy_rows,
    ref,
    role_policies,
    stack,
)
from tests.support.eks_clusters import (
    AZ,
    REGION,
    RESERVATION,
    _base_props,
    _both,
    _gpu_group,
    _launch_template_data,
    _managed_policy_names,
    _manifest,
    _props,
    _resources,
    _text,
)
from tests.support.eks_manifests import validate_manifests

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow


def test_cluster_runs_the_pinned_version_with_a_private_endpoint_and_all_control_plane_logs(eks) -> None:
    props = _props(eks["template"], eks["cluster"].cluster.node.default_child)
    assert props["Version"] == "1.36"
    assert props["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    assert props["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert {t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]} == {
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    }
    # HyperPod's EKS orchestrator needs access entries (API authentication); Auto Mode stays off.
    # HyperPod requires API or API_AND_CONFIG_MAP authentication (platforms.json).
    assert props["AccessConfig"]["AuthenticationMode"] == "API"
    assert "API" in service_fact("hyperpod", "eks_authentication_modes").value
    assert props["ComputeConfig"] == {"Enabled": False}
    net = eks["net"]
    assert props["ResourcesVpcConfig"]["SubnetIds"] == [ref(s.node.default_child) for s in net.vpc.private_subnets]
    assert {s.availability_zone for s in net.vpc.private_subnets} == {"us-east-1a", "us-east-1b"}


def test_secrets_are_envelope_encrypted_with_the_clusters_own_rotating_key(eks) -> None:
    template, cluster = eks["template"], eks["cluster"]
    key = cluster.secrets_key.node.default_child
    props = _props(template, cluster.cluster.node.default_child)
    assert props["EncryptionConfig"] == [{"Provider": {"KeyArn": get_att(key, "Arn")}, "Resources": ["secrets"]}]
    resource = template.find_resources("AWS::KMS::Key")[logical_id(key)]
    assert resource["Properties"]["EnableKeyRotation"] is True
    # The secrets live and die with the cluster: the key is scheduled for deletion with the stack.
    assert resource["DeletionPolicy"] == "Delete"
    # CloudFormation creates the cluster, and EKS takes a grant on the key: the key policy names no one else.
    (statement,) = resource["Properties"]["KeyPolicy"]["Statement"]
    assert (statement["Action"], statement["Resource"]) == ("kms:*", "*")
    assert statement["Principal"] == {"AWS": "arn:aws:iam::111111111111:root"}


def test_kubectl_handler_uses_the_layer_of_the_same_kubernetes_version_inside_the_vpc(eks) -> None:
    cluster = eks["cluster"]
    layer = _props(eks["template"], cluster.kubectl_layer.node.default_child)
    version = _props(eks["template"], cluster.cluster.node.default_child)["Version"]
    assert re.search(rf"kubectl {re.escape(version)}\.\d+", layer["Description"]), layer["Description"]
    assert isinstance(cluster.kubectl_layer, KUBERNETES_RELEASES[version].kubectl_layer)
    handler = cluster.cluster.kubectl_provider.node.find_child("Handler")
    function = _props(eks["template"], handler.node.default_child)
    assert ref(cluster.kubectl_layer.node.default_child) in function["Layers"]
    # The endpoint is private: the handler must run in the VPC's private subnets to reach it.
    private = [ref(s.node.default_child) for s in eks["net"].vpc.private_subnets]
    assert function["VpcConfig"]["SubnetIds"] == private


@pytest.mark.parametrize(
    ("name", "instance", "capacity", "scaling"),
    [
        ("p5", "p5.48xlarge", "CAPACITY_BLOCK", {"MinSize": 0, "DesiredSize": 0, "MaxSize": 4}),
        ("spot", "g5.48xlarge", "SPOT", {"MinSize": 1, "DesiredSize": 1, "MaxSize": 2}),
        ("odcr", "p4d.24xlarge", "ON_DEMAND", {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}),
    ],
)
def test_gpu_node_group_sits_in_the_single_az_on_its_efa_launch_template(
    eks, name: str, instance: str, capacity: str, scaling: dict
) -> None:
    group = _gpu_group(eks, name)
    subnet = eks["net"].compute_subnet
    assert subnet.availability_zone == AZ
    assert group["Subnets"] == [ref(subnet.node.default_child)]
    template = eks["cluster"].launch_templates[name].launch_template
    assert group["LaunchTemplate"] == {"Id": ref(template), "Version": get_att(template, "LatestVersionNumber")}
    # The launch template names the instance type, so the node group must name none.
    assert "InstanceTypes" not in group
    assert _launch_template_data(eks, name)["InstanceType"] == instance
    assert group["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert group["CapacityType"] == capacity
    assert group["ScalingConfig"] == scaling
    assert group["NodeRole"] == get_att(eks["cluster"].node_role.node.default_child, "Arn")
    assert group["Labels"]["kiln.io/node-group"] == name
    assert group["Labels"]["nvidia.com/gpu.present"] == "true"
    # Updates drain nodes within their pods' disruption budgets, or fail: never a forced eviction of a job.
    assert group["ForceUpdateEnabled"] is False


def test_launch_templates_carry_every_efa_the_placement_group_and_the_cluster_groups(eks) -> None:
    p5 = _launch_template_data(eks, "p5")
    assert len(p5["NetworkInterfaces"]) == 32
    assert p5["Placement"] == {"GroupName": get_att(eks["placement"].placement_group.node.default_child, "GroupName")}
    assert p5["NetworkInterfaces"][0]["Groups"] == [
        get_att(eks["efa"].security_group.node.default_child, "GroupId"),
        get_att(eks["cluster"].cluster.node.default_child, "ClusterSecurityGroupId"),
        get_att(eks["clients"].node.default_child, "GroupId"),
    ]
    assert {i["InterfaceType"] for i in p5["NetworkInterfaces"][1:]} == {"efa-only"}
    assert p5["BlockDeviceMappings"][0]["DeviceName"] == "/dev/xvda"
    assert p5["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 512
    assert p5["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert p5["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == RESERVATION
    assert p5["MetadataOptions"]["HttpTokens"] == "required"
    spot = _launch_template_data(eks, "spot")
    # EKS refuses launch templates that request spot; the node group asks for it instead.
    assert "InstanceMarketOptions" not in spot
    odcr = _launch_template_data(eks, "odcr")
    assert "Placement" not in odcr and "InstanceMarketOptions" not in odcr
    assert odcr["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == RESERVATION
    assert len(odcr["NetworkInterfaces"]) == 4


def test_gpu_nodes_boot_the_eks_bundle_and_the_node_role_reads_only_it(eks) -> None:
    user_data = _launch_template_data(eks, "p5")["UserData"]["Fn::Base64"]
    text = (
        user_data if isinstance(user_data, str) else "".join(p for p in user_data["Fn::Join"][1] if isinstance(p, str))
    )
    assert "Content-Type: multipart/mixed" in text
    assert "exec bash /opt/kiln/fetch.sh" in text and f"'eks-user-data.sh' '--sha256' '{PLAIN_BUNDLE_SHA256}'" in text
    assert "'KILN_CLUSTER_NAME=llm-eks'" in text
    role = eks["cluster"].node_role
    (policy,) = [
        p["Properties"]
        for p in _resources(eks["template"], "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [ref(role.node.default_child)]
    ]
    # The bundle read, beside SSM Agent's own actions (test_node_role_holds_only_what_nodes_need).
    [statement] = [s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "s3:GetObject"]
    assert statement["Resource"] == cdk.Stack.of(role).resolve(eks["bootstrap"].object_arn)


def test_system_node_group_runs_cluster_services_in_the_same_subnet(eks) -> None:
    cluster = eks["cluster"]
    group = _props(eks["template"], cluster.system_node_group.node.default_child)
    assert group["AmiType"] == "AL2023_x86_64_STANDARD"
    assert group["InstanceTypes"] == ["m5.2xlarge"]
    assert group["ScalingConfig"] == {"MinSize": 3, "DesiredSize": 3, "MaxSize": 3}
    assert group["Subnets"] == [ref(eks["net"].compute_subnet.node.default_child)]
    template_id = group["LaunchTemplate"]["Id"]["Ref"]
    data = eks["template"].to_json()["Resources"][template_id]["Properties"]["LaunchTemplateData"]
    assert data["SecurityGroupIds"] == [
        get_att(cluster.cluster.node.default_child, "ClusterSecurityGroupId"),
        get_att(eks["clients"].node.default_child, "GroupId"),
    ]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
    }
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True


def test_every_node_keeps_imds_to_itself(eks) -> None:
    templates = eks["template"].find_resources("AWS::EC2::LaunchTemplate")
    # The system group's template and one EFA template per GPU group: every node EKS launches here.
    assert len(templates) == 1 + len(eks["cluster"].launch_templates) == 4
    for name, resource in templates.items():
        options = resource["Properties"]["LaunchTemplateData"]["MetadataOptions"]
        assert (options["HttpTokens"], options["HttpPutResponseHopLimit"]) == ("required", 1), name


def test_node_role_holds_only_what_nodes_need(eks) -> None:
    for template, cluster in _both(eks):
        names = _managed_policy_names(template, cluster.node_role)
        assert "AmazonEKS_CNI_Policy" not in names
        assert sorted(names) == ["AmazonEC2ContainerRegistryPullOnly", "AmazonEKSWorkerNodePolicy"]
        # SSM Agent's own actions instead of AmazonSSMManagedInstanceCore: no ssm:GetParameter on *.
        granted = {
            row[0]
            for document in role_policies(template, cluster.node_role.node.default_child)
            for row in policy_rows(document)
        }
        assert set(acknowledgements.NODE_SSM_HEARTBEAT) | set(acknowledgements.NODE_SSM_CHANNELS) <= granted
        assert not any(action.startswith("ssm:GetParameter") for action in granted)


def test_vpc_cni_has_its_own_pod_identity_with_only_the_cni_policy(eks) -> None:
    for template, cluster in _both(eks):
        associations = {
            (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]): a["Properties"]
            for a in template.find_resources("AWS::EKS::PodIdentityAssociation").values()
        }
        # Only what calls AWS: the CNI, and the autoscaler where the cluster has node groups to scale.
        autoscaler = {("kube-system", "cluster-autoscaler")} if cluster.node_groups else set()
        assert set(associations) == {("kube-system", "aws-node")} | autoscaler
        props = associations["kube-system", "aws-node"]
        assert props == _props(template, cluster.cni_identity)
        assert (props["Namespace"], props["ServiceAccount"]) == ("kube-system", "aws-node")
        assert props["ClusterName"] == ref(cluster.cluster.node.default_child)
        role = cluster.cni_role
        assert props["RoleArn"] == get_att(role.node.default_child, "Arn")
        assert _managed_policy_names(template, role) == ["AmazonEKS_CNI_Policy"]
        # No inline policy adds anything to it.
        attached = [
            p
            for p in template.find_resources("AWS::IAM::Policy").values()
            if ref(role.node.default_child) in p["Properties"]["Roles"]
        ]
        assert attached == []
        (trust,) = _props(template, role.node.default_child)["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
        assert trust["Condition"]["StringEquals"] == {
            "aws:RequestTag/eks-cluster-arn": get_att(cluster.cluster.node.default_child, "Arn"),
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "aws-node",
        }


def test_pod_identity_agent_runs_before_any_node_joins(eks) -> None:
    for template, cluster in _both(eks):
        (agent,) = [
            logical
            for logical, addon in template.find_resources("AWS::EKS::Addon").items()
            if addon["Properties"]["AddonName"] == "eks-pod-identity-agent"
        ]
        association = logical_id(cluster.cni_identity)
        for nodegroup in template.find_resources("AWS::EKS::Nodegroup").values():
            assert {agent, association} <= set(nodegroup.get("DependsOn", []))


def test_kubectl_handler_keeps_no_registry_access(eks) -> None:
    # The handler pulls from a registry only for oci:// charts; every chart kiln installs comes over HTTPS.
    assert all(addon.repository.startswith("https://") for addon in HELM_ADDONS.values())
    for template, cluster in _both(eks):
        handler = cluster.cluster.kubectl_provider.node.find_child("Handler")
        names = _managed_policy_names(template, handler.role)
        assert names == ["service-role/AWSLambdaBasicExecutionRole", "service-role/AWSLambdaVPCAccessExecutionRole"]
        assert not [name for name in KUBECTL_ECR_POLICIES if name in json.dumps(template.to_json())]
        assert not any("HasEcrPublic" in name for name in template.to_json().get("Conditions", {}))


def test_admin_role_gets_a_cluster_admin_access_entry(eks) -> None:
    entries = [
        e["Properties"]
        for e in _resources(eks["template"], "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == get_att(eks["admin"].node.default_child, "Arn")
    ]
    assert len(entries) == 1
    (policy,) = entries[0]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "cluster-access-policy/AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


@pytest.mark.parametrize("key", sorted(HELM_ADDONS))
def test_each_helm_addon_is_installed_at_its_pinned_chart_version(eks, key: str) -> None:
    addon = HELM_ADDONS[key]
    # A pin is one exact published version: no ranges, no "latest".
    assert re.fullmatch(r"v?\d+\.\d+\.\d+", addon.version)
    for template, cluster in ((eks["template"], eks["cluster"]), (eks["hp_template"], eks["orchestrator"])):
        chart = _props(template, cluster.addons[key])
        assert {k: chart[k] for k in ("Chart", "Repository", "Version", "Namespace", "Release")} == {
            "Chart": addon.chart,
            "Repository": addon.repository,
            "Version": addon.version,
            "Namespace": addon.namespace,
            "Release": addon.release,
        }
        assert chart["ClusterName"] == ref(cluster.cluster.node.default_child)
    assert json.loads(_props(eks["template"], eks["cluster"].addons[key])["Values"]) == dict(addon.values)


def test_gpu_clusters_run_the_nvidia_plugin_and_no_neuron_components(eks) -> None:
    for template, cluster in _both(eks):
        assert cluster.accelerator_kinds == {"gpu"}
        assert {"nvidia-device-plugin", "efa-device-plugin"} <= set(cluster.addons)
        assert not {NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER} & set(cluster.addons)
        assert cluster.neuron_scheduler_name is None
        assert "public.ecr.aws/neuron/" not in json.dumps(template.to_json())


def test_training_operator_job_applies_the_pinned_commit_with_checked_tools(eks) -> None:
    objects = _manifest(eks["template"], eks["cluster"].addons[TRAINING_OPERATOR.name])
    (job,) = [o for o in objects if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    fetch, tools, apply = pod["initContainers"]
    env = {e["name"]: e["value"] for e in fetch["env"]}
    assert (env["REPOSITORY"], env["TAG"], env["COMMIT"]) == (
        "https://github.com/kubeflow/trainer.git",
        "v1.9.3",
        "c77ee3ff4d21aa8e5027580d83361c1a426ee789",
    )
    checked = install_tools("1.36")
    assert fetch["command"][4:] == [checked.kubectl.url, checked.kubectl.download]
    assert tools["image"] == checked.unpack_image
    assert apply["command"] == run_checked(
        checked.kubectl,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        "/src/checkout/manifests/overlays/standalone",
    )
    assert apply["image"] == fetch["image"] == checked.git_image
    assert re.fullmatch(r"kiln-install-training-operator-v1-9-3-[0-9a-f]{10}", job["metadata"]["name"])


def test_training_operator_install_cannot_outlive_its_privileges(eks) -> None:
    objects = _manifest(eks["template"], eks["cluster"].addons[TRAINING_OPERATOR.name])
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRoleBinding", "Job"]
    account, binding, job = objects
    pod = job["spec"]["template"]["spec"]
    namespace = job["metadata"]["namespace"]
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}
    ]
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (pod["serviceAccountName"], namespace)
    # The Job's one container starts only after every step succeeds, and empties the binding: its last act.
    fetch, tools, apply = pod["initContainers"]
    (revoke,) = pod["containers"]
    kubectl = install_tools("1.36").kubectl
    assert revoke["command"] == run_checked(
        kubectl,
        "patch",
        "clusterrolebinding",
        binding["metadata"]["name"],
        "--type",
        "merge",
        "--patch",
        '{"subjects": []}',
    )
    # No automounted (long-lived) token; a 10-minute one, mounted only where kubectl runs.
    assert account["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is False
    (token,) = [v for v in pod["volumes"] if "projected" in v]
    (source,) = [s for s in token["projected"]["sources"] if "serviceAccountToken" in s]
    assert source["serviceAccountToken"]["expirationSeconds"] == INSTALL_TOKEN_SECONDS == 600

    def token_mounts(container: dict) -> list[str]:
        return [m["mountPath"] for m in container["volumeMounts"] if m["name"] == token["name"]]

    assert token_mounts(fetch) == token_mounts(tools) == []
    assert token_mounts(apply) == token_mounts(revoke) == [SERVICE_ACCOUNT_DIR]
    # The finished Job and its pods (the only holders of that token) go away; it runs for a bounded time, as a user
    # that is not root.
    assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= 3600
    assert job["spec"]["backoffLimit"] <= 10
    assert job["spec"]["activeDeadlineSeconds"] == INSTALL_DEADLINE_SECONDS < INSTALL_WAIT_MINUTES * 60
    assert pod["restartPolicy"] == "OnFailure"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65533
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert all(c["securityContext"]["allowPrivilegeEscalation"] is False for c in [fetch, tools, apply, revoke])


def test_any_change_to_the_install_starts_a_new_job_that_revokes_again() -> None:
    # CDK re-applies the binding whenever a manifest object changes: the Job's name changes with them.
    tools = install_tools("1.36")
    first = kustomize_job_manifests(TRAINING_OPERATOR, tools)
    assert kustomize_job_manifests(TRAINING_OPERATOR, tools) == first
    changes = [
        ({"tag": "v1.9.4"}, tools),
        ({"commit": "0" * 40}, tools),
        ({"path": "manifests/base"}, tools),
        ({}, install_tools("1.35")),
    ]
    for change, with_tools in changes:
        changed = kustomize_job_manifests(dataclasses.replace(TRAINING_OPERATOR, **change), with_tools)
        assert changed[2]["metadata"]["name"] != first[2]["metadata"]["name"], change
        assert len(changed[2]["metadata"]["name"]) <= 63


def test_pvc_is_bound_to_the_kiln_fsx_file_system(eks) -> None:
    objects = {o["kind"]: o for o in _manifest(eks["template"], eks["cluster"].lustre_volume)}
    lustre = eks["lustre"]
    resolve = cdk.Stack.of(lustre).resolve
    assert objects["Namespace"]["metadata"]["name"] == "training"
    assert objects["StorageClass"]["provisioner"] == "fsx.csi.aws.com"
    volume, claim = objects["PersistentVolume"], objects["PersistentVolumeClaim"]
    assert volume["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": f"<Ref {logical_id(lustre.file_system.node.default_child)}>",
        "volumeAttributes": {
            "dnsname": _text(resolve(lustre.dns_name)),
            "mountname": _text(resolve(lustre.mount_name)),
        },
    }
    assert volume["spec"]["claimRef"] == {"namespace": "training", "name": claim["metadata"]["name"]}
    assert claim["metadata"]["namespace"] == "training"
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == volume["spec"]["storageClassName"]
    assert claim["spec"]["storageClassName"] == objects["StorageClass"]["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"]["storage"] == volume["spec"]["capacity"]["storage"] == "1200Gi"


def test_hyperpod_orchestrator_runs_only_system_nodes_and_exposes_what_hyperpod_wires(eks) -> None:
    template, orchestrator = eks["hp_template"], eks["orchestrator"]
    # No accelerated group: HyperPod brings those. The system group hosts cluster services and the install Jobs.
    [nodegroup] = template.find_resources("AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["Labels"] == {"kiln.io/node-group": "system"}
    template.resource_count_is("AWS::EC2::LaunchTemplate", 1)

    cluster = orchestrator.cluster.node.default_child
    stack = cdk.Stack.of(orchestrator)
    assert stack.resolve(orchestrator.cluster_arn) == get_att(cluster, "Arn")
    assert stack.resolve(orchestrator.cluster_name) == ref(cluster)
    assert stack.resolve(orchestrator.security_group.security_group_id) == get_att(cluster, "ClusterSecurityGroupId")
    groups = [stack.resolve(g.security_group_id) for g in orchestrator.connections.security_groups]
    assert stack.resolve(orchestrator.security_group.security_group_id) in groups
    props = _props(template, cluster)
    assert props["Name"] == "llm-hyperpod"
    # HyperPod requires API or API_AND_CONFIG_MAP authentication (platforms.json).
    assert props["AccessConfig"]["AuthenticationMode"] == "API"
    assert "API" in service_fact("hyperpod", "eks_authentication_modes").value
    vpc_config = props["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True and vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == ["203.0.113.0/24"]
    assert set(orchestrator.addons) == {*HELM_ADDONS, TRAINING_OPERATOR.name, HYPERPOD_DEPENDENCIES.name}
    assert orchestrator.lustre_volume is None


def test_templates_lint_clean_and_cdk_nag_has_no_open_findings(eks) -> None:
    outdir: Path = eks["outdir"]
    for name in ("Eks", "HyperPodEks"):
        errors, warnings = lint_template(outdir / f"{name}.template.json", REGION)
        assert (errors, warnings) == ([], []), name
    report = nag_report(outdir)
    assert report.violations == []
    assert report.acknowledged and all(reason.strip() for _, reason in report.acknowledged)
    # cdk-nag 3.0.2's EKS1/EKS2 only match aws_eks clusters, not aws_eks_v2's: the first test checks both here.


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kubernetes_version": "1.30"}, "kubernetes_version: got '1.30'; allowed: 1.34, 1.35, 1.36"),
        ({"endpoint": "public"}, "endpoint: got 'public'; allowed: private, public-and-private"),
        ({"endpoint": "public-and-private"}, "public_access_cidrs: got \\[\\]; allowed: at least one CIDR"),
        ({"endpoint": "public-and-private", "public_access_cidrs": ["0.0.0.0/0"]}, "not 0.0.0.0/0"),
        ({"public_access_cidrs": ["203.0.113.0/24"]}, "none with a private endpoint"),
        ({"efa_security_group": None}, "efa_security_group: got None"),
        ({"accelerated_groups": [AcceleratedNodeGroup(name="a", instance_type="p5.48xlarge")] * 2}, "groups names"),
        ({"accelerated_groups": [AcceleratedNodeGroup(name="system", instance_type="p5.48xlarge")]}, "not 'system'"),
        ({"external_accelerators": ["tpu"]}, "external_accelerators: got 'tpu'; allowed: gpu, neuron"),
        ({"cluster_name": "-bad"}, "cluster_name: got '-bad'"),
    ],
)
def test_invalid_cluster_props_are_refused(eks, change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EksTrainingClusterProps(**(_base_props(eks) | change))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ami_type": "BOTTLEROCKET_x86_64_NVIDIA"}, "ami_type: got 'BOTTLEROCKET_x86_64_NVIDIA'"),
        ({"min_count": 3, "max_count": 2}, "min_count/desired_count/max_count"),
        ({"desired_count": 5, "max_count": 4}, "min_count/desired_count/max_count"),
        ({"name": "P5"}, "name: got 'P5'"),
        ({"ami_type": "AL2023_ARM_64_NVIDIA"}, "an image for p5.48xlarge's GPUs: AL2023_x86_64_NVIDIA$"),
        ({"instance_type": "p5.huge"}, "instance_type: got 'p5.huge'; allowed: a type in kiln's catalog"),
        ({"labels": {"kiln.io/node-group": "x"}}, "labels"),
    ],
)
def test_invalid_gpu_groups_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AcceleratedNodeGroup(**({"name": "p5", "instance_type": "p5.48xlarge"} | kwargs))


def test_invalid_lustre_volumes_and_system_nodes_are_refused(eks) -> None:
    with pytest.raises(ValueError, match="file_system: got 'str'; allowed: a LustreFileSystem"):
        LustreVolume(file_system="fs-0123456789abcdef0", client_security_group=eks["clients"])
    with pytest.raises(ValueError, match="namespace: got 'Training'"):
        LustreVolume(file_system=eks["lustre"], client_security_group=eks["clients"], namespace="Training")
    st = cdk.Stack(new_app(), "ImportedFsx", env=ENV)
    clients = ec2.SecurityGroup.from_security_group_id(st, "Clients", "sg-0123456789abcdef0")
    with pytest.raises(ValueError, match="file_system_id: got 'fsx-1'"):
        LustreFileSystemAttributes(file_system_id="fsx-1", dns_name="d", mount_name="m", security_group=clients)
    with pytest.raises(ValueError, match="count: got 0"):
        SystemNodeGroup(count=0)


def test_control_plane_needs_two_availability_zones(eks) -> None:
    st = cdk.Stack(new_app(), "OneAz", env=ENV)
    vpc = ec2.Vpc.from_vpc_attributes(
        st, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=[AZ], private_subnet_ids=["subnet-0a"]
    )
    with pytest.raises(
        ValueError, match="control_plane_subnets: got \\['subnet-0a'\\]; allowed: subnets in at least two"
    ):
        EksTrainingCluster(
            st, "Cluster", EksTrainingClusterProps(vpc=vpc, node_subnet=vpc.private_subnets[0], system_nodes=None)
        )


def test_every_kubernetes_minor_has_its_layer_and_a_scheduler_of_the_layers_kubectl() -> None:
    from kiln.catalog.kubernetes import KUBECTL_RELEASES

    assert KUBERNETES_RELEASES.keys() == KUBECTL_RELEASES.keys()
    for minor, release in KUBERNETES_RELEASES.items():
        assert release.version.version == minor
        assert release.kube_scheduler_image == f"registry.k8s.io/kube-scheduler:v{KUBECTL_RELEASES[minor]}"


def test_the_gpu_and_efa_plugins_select_kilns_nodes_and_hyperpods_ml_named_ones(eks) -> None:
    """HyperPod names its nodes' instance type ml.<type> (platforms.json): the NVIDIA plugin selects them beside
    kiln's labelled GPU groups, and the EFA plugin lists both names of every EFA type kiln knows."""
    from kiln.catalog import instance_type

    nvidia = json.loads(_props(eks["hp_template"], eks["orchestrator"].addons["nvidia-device-plugin"])["Values"])
    first, second = nvidia["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert first == {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
    [expression] = second["matchExpressions"]
    assert expression["key"] == "node.kubernetes.io/instance-type" and expression["operator"] == "In"
    assert {"ml.p5.48xlarge", "ml.g5.12xlarge", "ml.p4d.24xlarge"} <= set(expression["values"])
    assert all(name.startswith("ml.") and instance_type(name).gpu_count for name in expression["values"])
    efa = json.loads(_props(eks["hp_template"], eks["orchestrator"].addons["efa-device-plugin"])["Values"])
    labels = efa["supportedInstanceLabels"]
    assert labels["keys"] == ["node.kubernetes.io/instance-type"]
    assert {"p5.48xlarge", "ml.p5.48xlarge", "trn1.32xlarge", "ml.trn1.32xlarge"} <= set(labels["values"])
    assert all(instance_type(name).efa_supported for name in labels["values"])
    assert "ml.m5.xlarge" not in labels["values"] and "ml.g5.xlarge" not in labels["values"]


def test_hyperpods_dependencies_install_from_the_pinned_commit_with_kilns_own_plugins_left_on(eks) -> None:
    objects = _manifest(eks["hp_template"], eks["orchestrator"].addons[HYPERPOD_DEPENDENCIES.name])
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRoleBinding", "Job"]
    account, binding, job = objects
    pod = job["spec"]["template"]["spec"]
    fetch, tools, dependencies, install = pod["initContainers"]
    env = {e["name"]: e["value"] for e in fetch["env"]}
    chart = service_fact("hyperpod", "dependencies_chart").value
    assert env["REPOSITORY"] == "https://github.com/aws/sagemaker-hyperpod-cli.git"
    assert (
        (env["TAG"], env["COMMIT"])
        == ("v3.9.0", "b01cf90676553a711ab1a8ac51422adbb09aef6b")
        == (
            chart["tag"],
            chart["commit"],
        )
    )
    # The checkout is refused unless the tag resolves to the pinned commit.
    assert '[ "$head" = "$COMMIT" ]' in fetch["command"][2]
    # The orchestrator runs Kubernetes 1.34: the tools of that minor, helm taken out of its archive and checked.
    checked = install_tools("1.34")
    assert fetch["command"][4:] == [
        checked.kubectl.url,
        checked.kubectl.download,
        checked.helm.url,
        checked.helm.download,
    ]
    assert tools["command"][4:] == [
        checked.kubectl.download,
        checked.kubectl.path,
        "-",
        checked.helm.download,
        checked.helm.path,
        "linux-amd64/helm",
    ]
    path = f"/src/checkout/{chart['path']}"
    assert dependencies["command"] == run_checked(checked.helm, "dependency", "update", path)
    args = install["command"][6:]
    assert install["command"][:6] == run_checked(checked.helm)
    assert args[:6] == ["upgrade", "--install", "hyperpod-dependencies", path, "--namespace", "kube-system"]
    settings = {args[i + 1] for i, arg in enumerate(args) if arg == "--set"}
    assert settings == {
        "nvidia-device-plugin.devicePlugin.enabled=false",
        "aws-efa-k8s-device-plugin.devicePlugin.enabled=false",
        "neuron-device-plugin.devicePlugin.enabled=false",
        "trainingOperators.enabled=false",
        f"health-monitoring-agent.region={REGION}",
    }
    # Only the install and the revoke reach the API, with the short-lived token; the fetch from GitHub does not.
    mounts = {c["name"]: {m["name"] for m in c["volumeMounts"]} for c in [fetch, tools, dependencies, install]}
    assert mounts == {
        "fetch": {"source"},
        "tools": {"source"},
        "dependencies": {"source"},
        "install": {"source", "install-api-access"},
    }
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert pod["containers"][0]["command"][6:9] == ["patch", "clusterrolebinding", account["metadata"]["name"]]
    assert re.fullmatch(r"kiln-install-hyperpod-dependencies-v3-9-0-[0-9a-f]{10}", job["metadata"]["name"])


def test_a_hyperpod_cluster_can_wait_for_its_dependencies_job_after_the_system_nodes(eks) -> None:
    template, orchestrator = eks["hp_template"], eks["orchestrator"]
    ready = orchestrator.hyperpod_dependencies_ready
    [job] = [o for o in _manifest(template, orchestrator.addons[HYPERPOD_DEPENDENCIES.name]) if o["kind"] == "Job"]
    resources = template.to_json()["Resources"]
    props = _props(template, ready)
    assert (props["ObjectType"], props["ObjectName"], props["ObjectNamespace"], props["JsonPath"]) == (
        "job",
        job["metadata"]["name"],
        "kube-system",
        ".status.succeeded",
    )

    # The success wait comes after the grant is taken back, which comes after the Job finished either way.
    def after(element_id: str, kind: str) -> str:
        [found] = [d for d in resources[element_id]["DependsOn"] if resources[d]["Type"] == kind]
        return found

    revoke_id = after(logical_id(_element(ready)), "Custom::AWSCDK-EKS-KubernetesPatch")
    finished = resources[after(revoke_id, "Custom::AWSCDK-EKS-KubernetesObjectValue")]
    assert finished["Properties"]["JsonPath"] == JOB_FINISHED_PATH
    assert finished["Properties"]["TimeoutSeconds"] == 14 * 60
    depends = set(finished["DependsOn"])
    assert logical_id(_element(orchestrator.addons[HYPERPOD_DEPENDENCIES.name])) in depends
    assert logical_id(orchestrator.system_node_group.node.default_child) in depends
    assert eks["cluster"].hyperpod_dependencies_ready is None


def _element(construct) -> cdk.CfnElement:
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return construct


def test_hyperpod_dependencies_need_system_nodes_to_install_on() -> None:
    st = stack("NoSystemNodes")
    vpc = imported_vpc(st)
    with pytest.raises(ValueError, match="system_nodes: got None; allowed: a system node group with hyperpod_dep"):
        EksTrainingClusterProps(
            vpc=vpc, node_subnet=vpc.private_subnets[0], system_nodes=None, hyperpod_dependencies=True
        )


def test_every_manifest_kiln_writes_passes_kubernetes_own_schema(eks) -> None:
    kinds = validate_manifests(_both(eks))
    assert {"Job", "ServiceAccount", "ClusterRoleBinding", "StorageClass", "PersistentVolume"} <= kinds, kinds
