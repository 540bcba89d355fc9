"""EKS scale and gang scheduling: the cluster-autoscaler (its chart, Pod Identity role and node-template tags) and
Kueue (its pinned install, configuration and queues). The clusters are test_eks.py's, synthesized once."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from kiln.catalog.kubernetes import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    JOB_NAMESPACE,
    JOB_QUEUE,
    NEURON_DEVICE_RESOURCE,
    NODE_GROUP_LABEL,
    node_resources,
)
from kiln.constructs.eks_addons import (
    INSTALL_NAMESPACE,
)
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup
from kiln.constructs.eks_props import EksTrainingClusterProps
from kiln.constructs.eks_scheduling import (
    AUTOSCALER_SERVICE_ACCOUNT,
    CLUSTER_AUTOSCALER_FACTS,
    IMAGE_PULL_SECONDS,
    KUEUE_FACTS,
    QueuedGroup,
    queue_manifests,
)
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP
from kiln.contracts.tags import TAG_EKS_CLUSTER, TAG_NODE_GROUP
from tests.support.constructs import get_att, logical_id, policy_rows, ref
from tests.support.eks_clusters import _base_props, _gpu_group, _manifest, _props, _text

TEMPLATE_TAG = CLUSTER_AUTOSCALER_FACTS["template_resource_tag_prefix"]


def _cfn(construct):
    """Return the CloudFormation resource under CONSTRUCT (an L2, or CDK's custom resource)."""
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return construct


def _chart(eks: dict) -> dict:
    return _props(eks["template"], eks["cluster"].addons["cluster-autoscaler"])


def test_the_autoscaler_chart_discovers_this_cluster_with_the_ca_of_its_minor(eks) -> None:
    chart = _chart(eks)
    cluster = eks["cluster"]
    assert (chart["Chart"], chart["Version"]) == ("cluster-autoscaler", CLUSTER_AUTOSCALER_FACTS["version"])
    assert chart["Repository"] == CLUSTER_AUTOSCALER_FACTS["repository"]
    values = json.loads(_text(chart["Values"]).replace(f"<Ref {logical_id(cluster.cluster.node.default_child)}>", "C"))
    assert values["autoDiscovery"] == {"clusterName": "C"}
    assert values["awsRegion"] == "us-east-1"
    assert values["image"]["tag"] == CLUSTER_AUTOSCALER_FACTS["images"][cluster.kubernetes_version]
    assert values["rbac"]["serviceAccount"]["name"] == AUTOSCALER_SERVICE_ACCOUNT
    assert values["nodeSelector"] == {NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP}
    assert values["extraArgs"]["max-node-provision-time"] == f"{eks['props'].node_provision_seconds}s"
    # Every minor kiln runs has a CA release of its own.
    from kiln.constructs.eks_addons import KUBERNETES_RELEASES

    assert set(CLUSTER_AUTOSCALER_FACTS["images"]) == set(KUBERNETES_RELEASES)


def test_the_autoscaler_role_holds_exactly_its_actions_and_scales_only_this_clusters_groups(eks) -> None:
    template, cluster = eks["template"], eks["cluster"]
    role = cluster.autoscaler_role
    props = _props(template, role.node.default_child)
    assert "ManagedPolicyArns" not in props
    [document] = [p["PolicyDocument"] for p in props["Policies"]]
    statements = document["Statement"]
    by_actions = {tuple(sorted(s["Action"] if isinstance(s["Action"], list) else [s["Action"]])): s for s in statements}
    describe = by_actions[tuple(sorted(CLUSTER_AUTOSCALER_FACTS["describe_actions"]))]
    assert describe["Resource"] == "*" and "Condition" not in describe
    [nodegroups] = [s for s in statements if s["Action"] == "eks:DescribeNodegroup"]
    assert ":nodegroup/" in _text(nodegroups["Resource"])
    assert _text(nodegroups["Resource"]).endswith(f"<Ref {logical_id(cluster.cluster.node.default_child)}>/*/*")
    scale = by_actions[tuple(sorted(CLUSTER_AUTOSCALER_FACTS["scale_actions"]))]
    assert scale["Resource"] == "*"
    # Only the Auto Scaling groups EKS tags as this cluster's (EKS Best Practices' condition).
    assert scale["Condition"] == {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/llm-eks": "owned"}}
    granted = {row[0] for row in policy_rows(document)}
    facts = CLUSTER_AUTOSCALER_FACTS
    assert granted == {*facts["describe_actions"], *facts["nodegroup_actions"], *facts["scale_actions"]}
    association = _props(template, cluster.node.find_child("ClusterAutoscalerPodIdentity"))
    assert (association["Namespace"], association["ServiceAccount"]) == ("kube-system", AUTOSCALER_SERVICE_ACCOUNT)
    assert association["RoleArn"] == get_att(role.node.default_child, "Arn")
    # The chart's pod starts after its association exists (credentials are injected at pod creation).
    chart_id = logical_id(_cfn(cluster.addons["cluster-autoscaler"]))
    depends = template.to_json()["Resources"][chart_id].get("DependsOn", [])
    assert logical_id(cluster.node.find_child("ClusterAutoscalerPodIdentity")) in depends


def test_the_autoscaler_needs_the_clusters_name_in_its_props(eks) -> None:
    """Its scaling grant's condition key holds the name, and a key cannot hold a deploy-time value."""
    with pytest.raises(ValueError, match="cluster_name: got None; allowed: a name with cluster_autoscaler"):
        EksTrainingClusterProps(**(_base_props(eks) | {"cluster_name": None}))
    EksTrainingClusterProps(**(_base_props(eks) | {"cluster_name": None, "cluster_autoscaler": False}))


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("p5", {GPU_RESOURCE: "8", EFA_RESOURCE: "32"}),
        ("spot", {GPU_RESOURCE: "8", EFA_RESOURCE: "1"}),
        ("odcr", {GPU_RESOURCE: "8", EFA_RESOURCE: "4"}),
    ],
)
def test_node_groups_tell_the_autoscaler_what_a_node_offers_before_one_exists(eks, group, expected) -> None:
    tags = _gpu_group(eks, group)["Tags"]
    assert tags == {f"{TEMPLATE_TAG}{name}": value for name, value in expected.items()}


def test_hyperpods_cluster_gets_no_autoscaler_and_no_queue(eks) -> None:
    orchestrator = eks["orchestrator"]
    assert orchestrator.autoscaler_role is None and orchestrator.queues is None
    assert not {"cluster-autoscaler", "kueue"} & set(orchestrator.addons)


def _kueue_job(eks: dict) -> dict:
    [job] = [o for o in _manifest(eks["template"], eks["cluster"].addons["kueue"]) if o["kind"] == "Job"]
    return job


def test_kueue_installs_from_its_pinned_commit_with_the_release_image_and_pytorchjob_on(eks) -> None:
    job = _kueue_job(eks)
    assert job["metadata"]["namespace"] == INSTALL_NAMESPACE
    steps = {c["name"]: c for c in job["spec"]["template"]["spec"]["initContainers"]}
    fetch = {e["name"]: e["value"] for e in steps["fetch"]["env"]}
    assert (fetch["TAG"], fetch["COMMIT"]) == (KUEUE_FACTS["tag"], KUEUE_FACTS["commit"])
    # helm's arguments, after the check of its sha256 (kiln.constructs.eks_addons.run_checked).
    args = steps["install"]["command"][6:]
    assert args[args.index("--namespace") + 1] == KUEUE_FACTS["namespace"] and "--create-namespace" in args
    settings = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set-json")
    manager = json.loads(settings["controllerManager.manager"])
    assert manager["image"] == {
        "repository": KUEUE_FACTS["image_repository"],
        "tag": KUEUE_FACTS["tag"],
        "pullPolicy": "IfNotPresent",
    }
    assert json.loads(settings["controllerManager.nodeSelector"]) == {NODE_GROUP_LABEL: EKS_SYSTEM_NODE_GROUP}
    config = json.loads(json.loads(settings["managerConfig.controllerManagerConfigYaml"]))
    assert config["apiVersion"] == KUEUE_FACTS["config_api_version"]
    assert "kubeflow.org/pytorchjob" in config["integrations"]["frameworks"]
    ready = config["waitForPodsReady"]
    assert ready["timeout"] == f"{eks['props'].node_provision_seconds + IMAGE_PULL_SECONDS}s"
    assert ready["blockAdmission"] is True


def test_the_queues_apply_only_after_kueue_is_installed(eks) -> None:
    template, cluster = eks["template"], eks["cluster"]
    resources = template.to_json()["Resources"]
    queues = resources[logical_id(_cfn(cluster.queues))]
    wait = _cfn(cluster.node.find_child("KueueReady"))
    assert logical_id(wait) in queues["DependsOn"]
    install = logical_id(_cfn(cluster.addons["kueue"]))
    # The success wait follows the outside revocation of the install's grant, which follows the Job's end.
    revoke = logical_id(_cfn(cluster.node.find_child("KueueRevoke")))
    finished = logical_id(_cfn(cluster.node.find_child("KueueFinished")))
    assert revoke in resources[logical_id(wait)]["DependsOn"]
    assert finished in resources[revoke]["DependsOn"]
    assert install in resources[finished]["DependsOn"]
    assert _props(template, wait)["JsonPath"] == ".status.succeeded"


def test_the_queue_holds_each_group_at_its_largest(eks) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _manifest(eks["template"], eks["cluster"].queues)}
    groups = eks["props"].accelerated_groups
    assert {name for kind, name in objects if kind == "ResourceFlavor"} == {g.name for g in groups}
    [resource_group] = objects["ClusterQueue", JOB_QUEUE]["spec"]["resourceGroups"]
    flavors = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in resource_group["flavors"]}
    assert flavors["p5"][EFA_RESOURCE] == "128" and flavors["p5"][GPU_RESOURCE] == "32"
    assert flavors["spot"][GPU_RESOURCE] == "16"
    assert flavors["p5"]["cpu"] == "768"
    assert objects["LocalQueue", JOB_QUEUE]["metadata"]["namespace"] == JOB_NAMESPACE
    assert objects["ResourceFlavor", "odcr"]["spec"]["nodeLabels"] == {NODE_GROUP_LABEL: "odcr"}


def test_groups_without_an_accelerator_kind_get_zero_quota_of_the_others() -> None:
    manifests = queue_manifests(
        [
            QueuedGroup(name="p5", instance_type="p5.48xlarge", max_count=2),
            QueuedGroup(name="trn", instance_type="trn1.32xlarge", max_count=1),
        ]
    )
    [queue] = [o for o in manifests if o["kind"] == "ClusterQueue"]
    [group] = queue["spec"]["resourceGroups"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quotas["p5"][NEURON_DEVICE_RESOURCE] == "0"
    assert quotas["trn"][NEURON_DEVICE_RESOURCE] == str(node_resources("trn1.32xlarge")[NEURON_DEVICE_RESOURCE])
    assert quotas["trn"][GPU_RESOURCE] == "0"


def test_system_nodes_carry_the_tags_kiln_ci_run_finds_them_by(eks) -> None:
    cluster = eks["cluster"]
    data = _props(eks["template"], cluster.node.find_child("SystemLaunchTemplate"))["LaunchTemplateData"]
    specs = data["TagSpecifications"]
    assert [spec["ResourceType"] for spec in specs] == ["instance", "volume", "network-interface"]
    for spec in specs:
        assert {t["Key"]: t["Value"] for t in spec["Tags"]} == {
            TAG_EKS_CLUSTER: ref(cluster.cluster.node.default_child),
            TAG_NODE_GROUP: EKS_SYSTEM_NODE_GROUP,
        }


def test_scaling_and_queues_need_system_nodes_and_a_sane_provision_time(eks) -> None:
    groups = [AcceleratedNodeGroup(name="p5", instance_type="p5.48xlarge")]
    with pytest.raises(
        ValueError, match="system_nodes: got None; allowed: a system node group with cluster_autoscaler"
    ):
        EksTrainingClusterProps(**(_base_props(eks) | {"system_nodes": None, "accelerated_groups": groups}))
    with pytest.raises(ValueError, match="node_provision_seconds: got 30"):
        EksTrainingClusterProps(**(_base_props(eks) | {"node_provision_seconds": 30}))
    # Without either (nor code-server, which runs there too), no system nodes are needed.
    EksTrainingClusterProps(
        **(
            _base_props(eks)
            | {
                "system_nodes": None,
                "accelerated_groups": groups,
                "cluster_autoscaler": False,
                "gang_scheduling": False,
                "code_server": None,
            }
        )
    )
