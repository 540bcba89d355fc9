"""Every image a node runs from kiln's charts and manifests can be pulled with that node's role (issue 45, A5).

Images come from what the shared clusters synthesize (every container of kiln's manifests and install Jobs, each
Helm chart's image as kiln's values set it or else the chart's default) and from what the charts installed by Jobs
run (platforms.json: HyperPod's dependency chart, per region). A private ECR image is pulled with the node's role:
the role must allow ecr:GetAuthorizationToken and the image reads on the repository's ARN (its registry's account
and region). Images of other registries (ECR Public, registry.k8s.io, nvcr.io, ghcr.io, Docker Hub) take no IAM
grant. Kubernetes may place any DaemonSet or unpinned Deployment on a HyperPod node, so HyperPod's execution role
must pull every image the orchestrator runs, and HyperPod's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk.assertions import Template

from kiln.catalog.platforms import service_fact
from kiln.constructs.eks_addons import EFA_DEVICE_PLUGIN
from tests.support.constructs import ref
from tests.support.eks_clusters import REGION, _managed_policy_names, _text
from tests.support.hyperpod import _eks_hyperpod

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
PULL_ACTIONS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
AUTHORIZATION_ACTION = "ecr:GetAuthorizationToken"
PRIVATE_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/(?P<repo>[^:@]+)"
)
# The default images of the Helm repository charts kiln installs without setting an image: the EFA plugin's
# (platforms.json), NVIDIA's plugin's (deployments/helm/nvidia-device-plugin/values.yaml at v0.19.3) and the FSx CSI
# driver's (charts/aws-fsx-csi-driver/values.yaml at tag helm-chart-aws-fsx-csi-driver-1.17.0: the driver and its
# sidecars, all on ECR Public).
CHART_DEFAULT_IMAGES = {
    EFA_DEVICE_PLUGIN.chart: [service_fact("eks", "efa_device_plugin_chart").value["image"]],
    "nvidia-device-plugin": ["nvcr.io/nvidia/k8s-device-plugin"],
    "aws-fsx-csi-driver": [
        "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver",
        "public.ecr.aws/csi-components/livenessprobe",
        "public.ecr.aws/csi-components/csi-node-driver-registrar",
        "public.ecr.aws/csi-components/csi-provisioner",
        "public.ecr.aws/csi-components/csi-resizer",
    ],
}
HYPERPOD_CHART = service_fact("hyperpod", "dependencies_chart").value

pytestmark = pytest.mark.slow  # HyperPod clusters synthesized per region, beside the shared EKS clusters


def hyperpod_chart_images(region: str) -> list[str]:
    """The images HyperPod's dependency chart runs in REGION with the subcharts kiln leaves on."""
    agent = HYPERPOD_CHART["images"]["health-monitoring-agent"]
    if region not in agent["accounts"]:
        region = agent["fallback_region"]
    registry = f"{agent['accounts'][region]}.dkr.ecr.{region}.amazonaws.com"
    return [f"{registry}/{agent['repository']}:{agent['tag']}", HYPERPOD_CHART["images"]["mpi-operator"]["image"]]


def _pod_images(obj: dict) -> Iterator[str]:
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec") if "template" in spec else (spec if obj["kind"] == "Pod" else None)
    for container in [*(pod or {}).get("initContainers", []), *(pod or {}).get("containers", [])]:
        yield container["image"]


def cluster_images(template: dict) -> set[str]:
    """Every image the synthesized cluster in TEMPLATE runs from kiln's manifests and Helm charts."""
    images: set[str] = set()
    for resource in template["Resources"].values():
        if resource["Type"] == KUBERNETES_RESOURCE:
            for obj in json.loads(_text(resource["Properties"]["Manifest"])):
                images.update(_pod_images(obj))
        elif resource["Type"] == HELM_CHART:
            values = json.loads(_text(resource["Properties"].get("Values", "{}")))
            repository = values.get("image", {}).get("repository")
            if repository is not None:
                images.add(repository)
            else:
                images.update(CHART_DEFAULT_IMAGES[resource["Properties"]["Chart"]])
    return images


def _pattern(resource: str) -> re.Pattern:
    resource = resource.replace("<Ref AWS::Partition>", "aws")
    return re.compile(".*".join(re.escape(part) for part in resource.split("*")))


def _grants(statements: list[dict]) -> list[tuple[str, re.Pattern]]:
    rows = []
    for statement in statements:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        rows += [(a, _pattern(_text(r))) for a in actions for r in resources]
    return rows


def unpullable(images: set[str], statements: list[dict]) -> list[str]:
    """Return the private ECR images of IMAGES that a role with STATEMENTS cannot pull."""
    grants = _grants(statements)
    refused = []
    for image in sorted(images):
        match = PRIVATE_ECR.match(image)
        if match is None:
            continue
        arn = f"arn:aws:ecr:{match['region']}:{match['account']}:repository/{match['repo']}"
        allowed = {a for a, pattern in grants if pattern.fullmatch(arn)}
        token = any(a == AUTHORIZATION_ACTION and pattern.fullmatch("*") for a, pattern in grants)
        if not (token and set(PULL_ACTIONS) <= allowed):
            refused.append(image)
    return refused


def _inline_statements(template: Template, role) -> list[dict]:
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if ref(role.node.default_child) in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _node_role_statements(template: Template, role) -> list[dict]:
    """ROLE's statements: its inline policies' and, for the AWS-managed registry policy, the policy's (data)."""
    registry = service_fact("eks", "node_registry_policy").value
    managed = [
        {"Effect": "Allow", "Action": registry["actions"], "Resource": registry["resource"]}
        for name in _managed_policy_names(template, role)
        if name == registry["name"]
    ]
    return [*_inline_statements(template, role), *managed]


def test_the_efa_plugin_image_is_in_another_regions_registry(eks):
    """The premise: kiln runs the chart's default EFA image, whose registry is not the cluster's region."""
    images = cluster_images(eks["template"].to_json())
    [efa] = [i for i in images if "aws-efa-k8s-device-plugin" in i]
    assert PRIVATE_ECR.match(efa)["region"] == "us-west-2" != REGION


def test_eks_nodes_pull_every_image_the_cluster_runs(eks):
    for template, cluster in ((eks["template"], eks["cluster"]), (eks["hp_template"], eks["orchestrator"])):
        images = cluster_images(template.to_json())
        assert [i for i in images if PRIVATE_ECR.match(i)], "no private ECR image: the check would be vacuous"
        assert unpullable(images, _node_role_statements(template, cluster.node_role)) == []


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3"])
def test_hyperpod_nodes_pull_every_image_the_orchestrator_and_hyperpods_chart_run(eks, region):
    """In a region of the health agent's map and one outside it (whose agent image comes from us-east-1)."""
    st = cdk.Stack(
        cdk.App(), f"HyperPodPulls{region.replace('-', '')}", env=cdk.Environment(account="111111111111", region=region)
    )
    imported = eks_v2.Cluster.from_cluster_attributes(
        st, "Eks", cluster_name="llm-hp-eks", cluster_security_group_id="sg-0123456789abcdef0"
    )
    hyperpod = _eks_hyperpod(st, imported)
    template = Template.from_stack(st)
    images = cluster_images(eks["hp_template"].to_json()) | set(hyperpod_chart_images(region))
    assert {PRIVATE_ECR.match(i)["region"] for i in images if PRIVATE_ECR.match(i)} - {region}
    assert unpullable(images, _inline_statements(template, hyperpod.role)) == []
