"""The network stack's second AZ (the spec's, the account's by CDK's lookup, or one clear line) and the interface
endpoints network.interface_endpoints gives the nodes' services."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from kiln.catalog.network import eks_refused_zone_ids, endpoint, node_endpoints, second_zone
from kiln.catalog.platforms import service_fact
from kiln.contracts.backends import platform_of
from kiln.spec import SpecError
from kiln.spec.load import parse_spec
from kiln.stacks.app import new_app
from kiln.stacks.network import NetworkStack, endpoint_names
from kiln.stacks.synth import lint_template, nag_report
from kiln.stacks.tidy import add_template_aspects
from kiln.stacks.zones import needs_two_zones
from tests.support.network_zones import (
    ACCOUNT_ENV,
    AGNOSTIC_ACCOUNT,
    EKS,
    HYPERPOD_EKS,
    LOOKUP,
    missing_context,
    network,
    spec_of,
    subnet_zones,
)
from tests.support.paths import EXAMPLES, ROOT
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`): about 10 s of syntheses, beside test_zone_answer.py.
pytestmark = pytest.mark.slow


def test_the_spec_names_the_second_az_whatever_the_lookup_lists() -> None:
    spec = spec_of(EKS, availability_zone="us-east-1c", network={"second_availability_zone": "us-east-1d"})
    assert subnet_zones(network(spec)) == ["us-east-1c", "us-east-1d"]
    zones = ["us-east-1a", "us-east-1c", "us-east-1d"]
    assert subnet_zones(network(spec, env=ACCOUNT_ENV, zones=zones)) == ["us-east-1c", "us-east-1d"]


def test_with_an_account_the_second_az_is_the_first_other_the_lookup_lists() -> None:
    zones = ["us-east-1-bos-1a", "us-east-1a", "us-east-1c", "us-east-1d"]
    assert subnet_zones(network(spec_of(EKS), env=ACCOUNT_ENV, zones=zones)) == ["us-east-1a", "us-east-1c"]
    # A Local Zone the account opted into is no availability zone of the VPC's.
    other = spec_of(EKS, availability_zone="us-east-1c")
    assert subnet_zones(network(other, env=ACCOUNT_ENV, zones=zones)) == ["us-east-1c", "us-east-1a"]


def test_the_lookup_reproduces_the_zone_kiln_used_to_guess_where_that_zone_existed() -> None:
    # Before, "...a" became "...b" and any other became "...a": a deployed VPC keeps its subnets on a redeploy.
    zones = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"]
    for first in zones:
        guessed = first[:-1] + ("b" if first.endswith("a") else "a")
        assert second_zone(first, zones) == guessed


def test_before_the_cli_has_looked_up_the_azs_the_synth_records_the_lookup_and_goes_on() -> None:
    stack = network(spec_of(EKS), env=ACCOUNT_ENV)
    first, placeholder = subnet_zones(stack)
    assert first == "us-east-1a" and not placeholder.startswith("us-east-1")
    assert missing_context(stack) == [LOOKUP]


def test_eks_without_an_account_or_a_second_az_is_refused_with_one_line() -> None:
    with pytest.raises(SpecError) as caught:
        network(spec_of(EKS))
    (line,) = caught.value.lines_out()
    assert line.startswith(
        "t: network.second_availability_zone: is required on eks, whose control plane needs subnets in 2 AZs, when "
        "kiln cannot look up the account's AZs (synthesized without an account): set it to another AZ of us-east-1 "
        "than us-east-1a"
    )
    assert "deploy with credentials" in line
    with pytest.raises(SpecError, match="is required on HyperPod orchestrated by EKS"):
        network(spec_of(HYPERPOD_EKS))


def test_eks_where_the_account_lists_no_other_az_is_refused_with_one_line() -> None:
    with pytest.raises(SpecError, match="when the account lists no AZ of us-east-1 besides us-east-1a: set it"):
        network(spec_of(EKS), env=ACCOUNT_ENV, zones=["us-east-1a"])


def test_a_cluster_without_eks_takes_one_az_when_none_other_is_known() -> None:
    for zones, env in ((None, AGNOSTIC_ACCOUNT), (["us-east-1a"], ACCOUNT_ENV)):
        stack = network(spec_of(), env=env, zones=zones)
        template = Template.from_stack(stack)
        template.resource_count_is("AWS::EC2::Subnet", 2)
        assert subnet_zones(stack) == ["us-east-1a"]
        template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_only_an_eks_control_plane_needs_two_azs() -> None:
    assert needs_two_zones(spec_of(EKS)) and needs_two_zones(spec_of(HYPERPOD_EKS))
    slurm = {**HYPERPOD_EKS, "orchestrator": "slurm"}
    for compute in (None, slurm, {**EKS, "backend": "parallelcluster"}):
        assert not needs_two_zones(spec_of(compute))


def test_a_vpc_without_availability_zone_takes_the_regions_first_two_as_before() -> None:
    data = {key: value for key, value in MINIMAL_SPEC.items() if key not in ("region", "availability_zone")}
    stack = network(parse_spec({**data, "compute": EKS}, "spec.yaml"), env=cdk.Environment())
    template = Template.from_stack(stack).to_json()
    zones = [
        r["Properties"]["AvailabilityZone"] for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet"
    ]
    assert {json.dumps(zone) for zone in zones} == {
        json.dumps({"Fn::Select": [index, {"Fn::GetAZs": ""}]}) for index in (0, 1)
    }


def test_every_eks_example_names_a_second_az_of_its_region() -> None:
    eks_examples = 0
    for path in EXAMPLES:
        data = yaml.safe_load(path.read_text())
        compute = data["compute"]
        if compute["backend"] != "eks" and compute.get("orchestrator") != "eks":
            continue
        eks_examples += 1
        second = data["network"]["second_availability_zone"]
        assert second != data["availability_zone"] and second[:-1] == data["region"], path.name
        # The first other AZ the account lists, as the lookup would give it in an account with the usual names.
        assert second == f"{data['region']}a", path.name
    assert eks_examples == 3


def _endpoints(stack: NetworkStack) -> dict[str, dict]:
    resources = Template.from_stack(stack).find_resources("AWS::EC2::VPCEndpoint").values()
    return {json.dumps(r["Properties"]["ServiceName"]): r["Properties"] for r in resources}


@pytest.mark.parametrize(
    ("compute", "prometheus", "interface", "gateway"),
    [
        (None, True, ("ssm", "ssmmessages", "ec2messages", "pcs", "aps-workspaces"), ()),
        (
            {**EKS, "backend": "parallelcluster"},
            False,
            ("ssm", "ssmmessages", "ec2messages", "ec2", "cloudformation", "logs"),
            ("dynamodb",),
        ),
        ({**HYPERPOD_EKS, "orchestrator": "slurm"}, True, ("ssmmessages", "logs", "monitoring", "aps-workspaces"), ()),
        (
            HYPERPOD_EKS,
            True,
            ("ssmmessages", "logs", "monitoring", "ecr.api", "ecr.dkr", "eks-auth", "ec2", "sts"),
            (),
        ),
        (
            EKS,
            True,
            ("ssm", "ssmmessages", "ec2messages", "ecr.api", "ecr.dkr", "eks-auth", "ec2", "autoscaling", "eks"),
            (),
        ),
    ],
)
def test_each_backend_gets_the_endpoints_its_nodes_call(compute, prometheus, interface, gateway) -> None:
    observability = {"observability": {"prometheus": True}} if prometheus else {}
    network_section = {"interface_endpoints": True, "second_availability_zone": "us-east-1b"}
    spec = spec_of(compute, network=network_section, **observability)
    assert endpoint_names(spec) == (interface, gateway)
    # Without the option: none.
    plain = spec_of(compute, network={"second_availability_zone": "us-east-1b"}, **observability)
    assert endpoint_names(plain) == ((), ())


def test_no_node_role_calls_sagemakers_api_so_no_backend_gets_its_endpoint() -> None:
    for backend, orchestrator in (("hyperpod", "slurm"), ("hyperpod", "eks"), ("eks", None), ("pcs", None)):
        platform = platform_of(backend, orchestrator)
        names = {e.name for e in node_endpoints(platform.name, prometheus_agent=platform.runs_slurm)}
        assert not any(name.startswith("sagemaker") for name in names)


@pytest.fixture(scope="module")
def eks_endpoints() -> NetworkStack:
    spec = spec_of(EKS, network={"interface_endpoints": True, "second_availability_zone": "us-east-1b"})
    return network(spec, env=ACCOUNT_ENV)


def test_the_template_has_an_interface_endpoint_per_service_in_the_compute_subnet(eks_endpoints) -> None:
    found = _endpoints(eks_endpoints)
    interface = {json.loads(name) for name, props in found.items() if props["VpcEndpointType"] == "Interface"}
    wanted = node_endpoints("eks")
    assert interface == {e.service_name("us-east-1") for e in wanted}
    compute = cdk.Stack.of(eks_endpoints).resolve(eks_endpoints.training_vpc.compute_subnet.subnet_id)
    assert all(props["SubnetIds"] == [compute] for props in found.values() if props["VpcEndpointType"] == "Interface")


def test_the_endpoints_admit_https_from_the_vpc_cidr_and_nothing_from_anywhere(eks_endpoints) -> None:
    template = Template.from_stack(eks_endpoints).to_json()
    vpc = "10.0.0.0/16"  # the spec's network.vpc_cidr, the VPC's own
    assert [r["Properties"]["CidrBlock"] for r in template["Resources"].values() if r["Type"] == "AWS::EC2::VPC"] == [
        vpc
    ]
    group = eks_endpoints.training_vpc.endpoint_security_group
    rules = template["Resources"][cdk.Stack.of(group).get_logical_id(group.node.default_child)]["Properties"]
    assert [(r["CidrIp"], r["FromPort"], r["ToPort"], r["IpProtocol"]) for r in rules["SecurityGroupIngress"]] == [
        (vpc, 443, 443, "tcp")
    ]
    every_ingress = [
        rule
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::EC2::SecurityGroup"
        for rule in resource["Properties"].get("SecurityGroupIngress", [])
    ]
    assert all(rule.get("CidrIp") != "0.0.0.0/0" for rule in every_ingress)


def test_the_endpoint_data_names_aws_services_by_their_documented_names() -> None:
    needs = service_fact("vpc_endpoints", "node_needs").value
    for names in needs.values():
        for name in names:
            found = endpoint(name)
            assert found.service_name("eu-west-1") == f"com.amazonaws.eu-west-1.{name}"
            assert found.source.startswith("https://docs.aws.amazon.com/")
    assert endpoint("dynamodb").gateway and not endpoint("ssm").gateway


def test_eks_refuses_the_zone_ids_its_guide_lists() -> None:
    assert eks_refused_zone_ids("us-east-1") == ("use1-az3",)
    assert eks_refused_zone_ids("us-west-1") == ("usw1-az2",)
    assert eks_refused_zone_ids("ca-central-1") == ("cac1-az3",)
    assert eks_refused_zone_ids("eu-west-1") == ()
    assert service_fact("eks", "control_plane_zones").source == (
        "https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html#cluster-subnets"
    )


def test_the_cdk_app_refuses_eks_without_a_second_az_in_one_line(tmp_path: Path) -> None:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["compute"] = copy.deepcopy(EKS)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {
        **{k: v for k, v in os.environ.items() if k != "CDK_DEFAULT_ACCOUNT"},
        "CDK_OUTDIR": str(tmp_path / "out"),
        "CDK_CONTEXT_JSON": json.dumps({"spec": str(path)}),
    }
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in result.stderr.splitlines() if line and not line.startswith(("b'", "!!"))]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{path}: network.second_availability_zone: is required on eks")


@pytest.fixture(scope="module")
def linted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Network stacks with every backend's endpoints, synthesized as kiln's are (cdk-nag on, tidied)."""
    outdir = tmp_path_factory.mktemp("network")
    app = new_app(str(outdir))
    network_section = {"interface_endpoints": True, "second_availability_zone": "us-east-1b"}
    for name, compute in (("eks", EKS), ("pc", {**EKS, "backend": "parallelcluster"}), ("hp", HYPERPOD_EKS)):
        spec = spec_of(compute, name=name, network=network_section, observability={"prometheus": True})
        add_template_aspects(NetworkStack(app, f"{name}-network", spec=spec, env=ACCOUNT_ENV))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    app.synth()
    return outdir


def test_endpoint_templates_pass_cdk_nag_and_cfn_lint(linted: Path) -> None:
    assert nag_report(linted).violations == []
    templates = sorted(linted.glob("*-network.template.json"))
    assert len(templates) == 3
    for template in templates:
        assert lint_template(template, "us-east-1") == ([], []), template.name
