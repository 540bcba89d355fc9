"""The EKS clusters the construct tests share, synthesized once per test process, and helpers to read them."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from kiln.constructs import (
    CapacityOption,
    LustreFileSystem,
    LustreFileSystemProps,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.eks import EksTrainingCluster
from kiln.constructs.eks_code_server import CodeServerPod
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup, SystemNodeGroup
from kiln.constructs.eks_props import EksTrainingClusterProps, LustreVolume
from kiln.stacks.app import new_app
from tests.support.constructs import ENV, efa_network, logical_id, plain_bootstrap, synth_as_kiln

REGION = "us-east-1"
AZ = "us-east-1a"
RESERVATION = "cr-0123456789abcdef0"


@pytest.fixture(scope="session")
def eks(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Synthesize, once per test process (test_eks_scheduling.py shares it) and with cdk-nag on, a training cluster
    and a HyperPod-shaped one (no node groups)."""
    outdir = tmp_path_factory.mktemp("eks")
    app = new_app(str(outdir))
    st = cdk.Stack(app, "Eks", env=ENV)
    network = efa_network(st, AZ)
    net, efa, placement = network.net, network.efa, network.placement
    lustre = LustreFileSystem(st, "Lustre", LustreFileSystemProps(vpc=net.vpc, subnet=net.compute_subnet))
    clients = ec2.SecurityGroup(st, "LustreClients", vpc=net.vpc, description="Lustre clients")
    lustre.allow_from(clients)
    admin = iam.Role(st, "Admin", assumed_by=iam.AccountRootPrincipal())
    bootstrap = plain_bootstrap(st, "eks-user-data.sh")
    props = EksTrainingClusterProps(
        vpc=net.vpc,
        node_subnet=net.compute_subnet,
        efa_security_group=efa.security_group,
        accelerated_groups=[
            AcceleratedNodeGroup(
                name="p5",
                instance_type="p5.48xlarge",
                max_count=4,
                root_volume_gib=512,
                capacity=CapacityOption(type="capacity-block", reservation_id=RESERVATION),
                placement_group=placement.placement_group,
            ),
            AcceleratedNodeGroup(
                name="spot",
                instance_type="g5.48xlarge",
                min_count=1,
                max_count=2,
                capacity=CapacityOption(type="spot"),
                placement_group=placement.placement_group,
            ),
            AcceleratedNodeGroup(
                name="odcr",
                instance_type="p4d.24xlarge",
                max_count=2,
                capacity=CapacityOption(type="reservation", reservation_id=RESERVATION),
                labels={"team": "ml"},
            ),
        ],
        system_nodes=SystemNodeGroup(instance_type="m5.2xlarge", count=3),
        cluster_name="llm-eks",
        admin_role=admin,
        lustre=LustreVolume(
            file_system=lustre,
            client_security_group=clients,
            storage_gib=1200,
            namespace="training",
        ),
        code_server=CodeServerPod(home="code-server/llm-eks"),
        bootstrap=bootstrap,
        cluster_env={"KILN_CLUSTER_NAME": "llm-eks", "KILN_REGION": REGION},
    )
    cluster = EksTrainingCluster(st, "Cluster", props)
    hp_stack = cdk.Stack(app, "HyperPodEks", env=ENV)
    hp_net = TrainingVpc(hp_stack, "Vpc", TrainingVpcProps(availability_zone=AZ, second_availability_zone="us-east-1b"))
    orchestrator = EksTrainingCluster(
        hp_stack,
        "Orchestrator",
        EksTrainingClusterProps(
            vpc=hp_net.vpc,
            node_subnet=hp_net.compute_subnet,
            # HyperPod's dependencies install on the system nodes before any HyperPod node exists.
            hyperpod_dependencies=True,
            # The newest minor HyperPod on EKS supports (kiln.catalog.kubernetes: both of AWS's pages list it).
            kubernetes_version="1.34",
            # HyperPod's p5 workers join with NVIDIA GPUs.
            external_accelerators=["gpu"],
            cluster_name="llm-hyperpod",
            endpoint="public-and-private",
            public_access_cidrs=["203.0.113.0/24"],
        ),
    )
    templates = synth_as_kiln(app, outdir, [st, hp_stack])
    return {
        "outdir": outdir,
        "net": net,
        "efa": efa,
        "placement": placement,
        "lustre": lustre,
        "clients": clients,
        "admin": admin,
        "bootstrap": bootstrap,
        "props": props,
        "cluster": cluster,
        "orchestrator": orchestrator,
        "template": templates["Eks"],
        "hp_template": templates["HyperPodEks"],
    }


def _resources(template: Template, kind: str) -> dict:
    return template.find_resources(kind)


def _props(template: Template, construct) -> dict:
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return template.to_json()["Resources"][logical_id(construct)]["Properties"]


def _gpu_group(eks: dict, name: str) -> dict:
    return _props(eks["template"], eks["cluster"].node_groups[name].node.default_child)


def _launch_template_data(eks: dict, name: str) -> dict:
    return _props(eks["template"], eks["cluster"].launch_templates[name].launch_template)["LaunchTemplateData"]


def _text(value) -> str:
    """Render a resolved CloudFormation string with its tokens shown as <Ref X> and <X.Attr>."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return f"<Ref {value['Ref']}>"
    if "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    separator, parts = value["Fn::Join"]
    return separator.join(_text(part) for part in parts)


def _manifest(template: Template, construct) -> list[dict]:
    """Return the Kubernetes objects of a manifest resource, tokens rendered by _text."""
    return json.loads(_text(_props(template, construct)["Manifest"]))


def _both(eks: dict) -> list[tuple[Template, EksTrainingCluster]]:
    """The training cluster and the HyperPod-shaped one, each with its template."""
    return [(eks["template"], eks["cluster"]), (eks["hp_template"], eks["orchestrator"])]


def _managed_policy_names(template: Template, role) -> list[str]:
    """Return the names of the AWS-managed policies on ROLE's synthesized CloudFormation."""
    arns = _props(template, role.node.default_child).get("ManagedPolicyArns", [])
    return [_text(arn).rsplit(":policy/", 1)[1] for arn in arns]


def _base_props(eks: dict) -> dict:
    base = eks["props"]
    return {f: getattr(base, f) for f in base.__dataclass_fields__}
