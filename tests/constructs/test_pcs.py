"""PcsCluster: cluster, node groups with EFA launch templates, queues, login group, node role."""

from __future__ import annotations

import re

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2

from kiln.catalog.platforms import root_device_name, service_fact
from kiln.constructs import CapacityOption
from kiln.constructs.acknowledgements import NODE_SSM_CHANNELS, NODE_SSM_GRANTS
from kiln.constructs.pcs import NAME_DIGEST_LENGTH, PcsCluster, PcsClusterProps, PcsNodeGroup, node_group_name
from kiln.contracts.iam_wildcards import template_wildcards
from kiln.stacks.app import new_app
from kiln.stacks.synth import nag_report
from tests.support.constructs import (
    PLAIN_BUNDLE_SHA256,
    get_att,
    imported_vpc,
    logical_id,
    plain_bootstrap,
    ref,
    stack,
    synth_as_kiln,
)

SSM_DOCS = service_fact("systems_manager", "instance_actions").value


@pytest.fixture(scope="module")
def pcs(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("pcs-assembly")
    app = new_app(str(outdir))
    st = stack("Pcs", app)
    vpc = imported_vpc(st)
    efa = ec2.SecurityGroup(st, "Efa", vpc=vpc)
    clients = ec2.SecurityGroup(st, "LustreClients", vpc=vpc)
    bootstrap = plain_bootstrap(st)
    props = PcsClusterProps(
        vpc=vpc,
        subnet=vpc.private_subnets[0],
        efa_security_group=efa,
        ami_id="ami-0123456789abcdef0",
        root_device_name=root_device_name("ubuntu2204"),
        compute_groups=[
            PcsNodeGroup(
                name="p5cb",
                instance_type="p5.48xlarge",
                min_count=4,
                max_count=4,
                root_volume_gib=512,
                capacity=CapacityOption(type="capacity-block", reservation_id="cr-0123456789abcdef0"),
            ),
            PcsNodeGroup(
                name="spot",
                instance_type="g5.12xlarge",
                max_count=2,
                capacity=CapacityOption(type="spot"),
                placement_group=ec2.PlacementGroup.from_placement_group_name(st, "Placement", "pg-kiln"),
            ),
        ],
        login=PcsNodeGroup(name="login", instance_type="m5.2xlarge", min_count=1, max_count=1),
        bootstrap=bootstrap,
        cluster_env={"KILN_CLUSTER_NAME": "llm-pcs", "KILN_REGION": "us-east-1", "KILN_FSX_DNS": "fs.example"},
        slurm_version="25.11",
        size="MEDIUM",
        scale_down_idle_seconds=900,
        slurm_custom_settings={"SuspendTime": "900"},
        security_groups=[clients],
    )
    cluster = PcsCluster(st, "Cluster", props)
    return {
        "props": props,
        "cluster": cluster,
        "efa": efa,
        "clients": clients,
        "bootstrap": bootstrap,
        # Synthesized as kiln's stacks are, cdk-nag on.
        "template": synth_as_kiln(app, outdir, [st])["Pcs"],
        "outdir": outdir,
    }


def _group(pcs, name: str) -> dict:
    construct = pcs["cluster"].login_group if name == "login" else pcs["cluster"].node_groups[name]
    return pcs["template"].find_resources("AWS::PCS::ComputeNodeGroup")[logical_id(construct)]["Properties"]


def test_cluster_runs_the_requested_slurm_in_the_private_subnet(pcs) -> None:
    cluster = pcs["cluster"]
    pcs["template"].has_resource_properties(
        "AWS::PCS::Cluster",
        {
            "Scheduler": {"Type": "SLURM", "Version": "25.11"},
            "Size": "MEDIUM",
            "Networking": {
                "SubnetIds": ["subnet-0123456789abcdef0"],
                "SecurityGroupIds": [get_att(cluster.security_group.node.default_child, "GroupId")],
            },
            "SlurmConfiguration": {
                "ScaleDownIdleTimeInSeconds": 900,
                "SlurmCustomSettings": [{"ParameterName": "SuspendTime", "ParameterValue": "900"}],
            },
        },
    )


def test_cluster_group_admits_only_its_members(pcs) -> None:
    group = get_att(pcs["cluster"].security_group.node.default_child, "GroupId")
    ingress = [
        r["Properties"]
        for r in pcs["template"].find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == group
    ]
    assert ingress == [
        {
            "IpProtocol": "-1",
            "GroupId": group,
            "SourceSecurityGroupId": group,
            "Description": "Slurm controller, slurmd, srun",
        }
    ]


def test_one_node_group_per_group_plus_login_and_one_queue_per_compute_group(pcs) -> None:
    template = pcs["template"]
    template.resource_count_is("AWS::PCS::ComputeNodeGroup", 3)
    template.resource_count_is("AWS::PCS::Queue", 2)
    for name in ("p5cb", "spot"):
        template.has_resource_properties(
            "AWS::PCS::Queue",
            {
                "Name": name,
                "ClusterId": get_att(pcs["cluster"].cluster, "Id"),
                "ComputeNodeGroupConfigurations": [
                    {"ComputeNodeGroupId": get_att(pcs["cluster"].node_groups[name], "Id")}
                ],
            },
        )


@pytest.mark.parametrize(
    ("name", "instance", "scaling", "purchase"),
    [
        ("p5cb", "p5.48xlarge", (4, 4), "CAPACITY_BLOCK"),
        ("spot", "g5.12xlarge", (0, 2), "SPOT"),
        ("login", "m5.2xlarge", (1, 1), "ONDEMAND"),
    ],
)
def test_node_group_settings(pcs, name: str, instance: str, scaling: tuple[int, int], purchase: str) -> None:
    props = _group(pcs, name)
    cluster = pcs["cluster"]
    assert props["Name"] == node_group_name(name, [instance])
    assert props["AmiId"] == "ami-0123456789abcdef0"
    assert props["InstanceConfigs"] == [{"InstanceType": instance}]
    assert props["ScalingConfiguration"] == {"MinInstanceCount": scaling[0], "MaxInstanceCount": scaling[1]}
    assert props["PurchaseOption"] == purchase
    assert props["SubnetIds"] == ["subnet-0123456789abcdef0"]
    assert props["IamInstanceProfileArn"] == get_att(cluster.instance_profile, "Arn")
    template_id = props["CustomLaunchTemplate"]["TemplateId"]["Ref"]
    assert props["CustomLaunchTemplate"]["Version"] == {"Fn::GetAtt": [template_id, "LatestVersionNumber"]}
    data = pcs["template"].find_resources("AWS::EC2::LaunchTemplate")[template_id]["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == instance


def test_capacity_block_group_targets_its_reservation(pcs) -> None:
    template_id = _group(pcs, "p5cb")["CustomLaunchTemplate"]["TemplateId"]["Ref"]
    data = pcs["template"].find_resources("AWS::EC2::LaunchTemplate")[template_id]["Properties"]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert len(data["NetworkInterfaces"]) == 32
    primary = data["NetworkInterfaces"][0]["Groups"]
    assert primary == [
        get_att(pcs["efa"].node.default_child, "GroupId"),
        get_att(pcs["cluster"].security_group.node.default_child, "GroupId"),
        get_att(pcs["clients"].node.default_child, "GroupId"),
    ]


def test_nodes_boot_the_pcs_bundle_with_their_role(pcs) -> None:
    template_id = _group(pcs, "login")["CustomLaunchTemplate"]["TemplateId"]["Ref"]
    user_data = pcs["template"].find_resources("AWS::EC2::LaunchTemplate")[template_id]["Properties"][
        "LaunchTemplateData"
    ]["UserData"]
    body = user_data["Fn::Base64"]
    text = body if isinstance(body, str) else "".join(p for p in body["Fn::Join"][1] if isinstance(p, str))
    assert "exec bash /opt/kiln/fetch.sh" in text
    assert f"'pcs-user-data.sh' '--sha256' '{PLAIN_BUNDLE_SHA256}' '--role' 'login'" in text
    assert "'KILN_FSX_DNS=fs.example'" in text


def test_node_role_follows_the_pcs_rule_and_least_privilege(pcs) -> None:
    cluster = pcs["cluster"]
    template = pcs["template"]
    role = template.find_resources("AWS::IAM::Role")[logical_id(cluster.role.node.default_child)]["Properties"]
    assert role["Path"] == "/aws-pcs/"
    # No AWS-managed policy: AmazonSSMManagedInstanceCore would let every node read the account's SSM parameters.
    assert "ManagedPolicyArns" not in role
    template.has_resource_properties(
        "AWS::IAM::InstanceProfile", {"Path": "/aws-pcs/", "Roles": [ref(cluster.role.node.default_child)]}
    )
    (policy,) = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [ref(cluster.role.node.default_child)]
    ]
    statements = policy["PolicyDocument"]["Statement"]
    assert {
        "Action": "pcs:RegisterComputeNodeGroupInstance",
        "Effect": "Allow",
        "Resource": get_att(cluster.cluster, "Arn"),
    } in statements
    (s3,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert s3["Resource"] == Stack.of(cluster).resolve(pcs["bootstrap"].object_arn)
    assert "bundles/node.zip" in str(s3["Resource"])
    # SSM Agent's own calls for Session Manager and Run Command, exactly as AWS lists them, and nothing else of SSM:
    # its heartbeat on this account's instances, its channels (which take no resource) on *.
    (heartbeat,) = [s for s in statements if s["Action"] == "ssm:UpdateInstanceInformation"]
    assert heartbeat["Resource"] == "arn:aws:ec2:us-east-1:111111111111:instance/*"
    (channels,) = [s for s in statements if s["Resource"] == "*"]
    granted = sorted([heartbeat["Action"], *channels["Action"]])
    assert granted == sorted([*SSM_DOCS["session_manager"], *SSM_DOCS["run_command"]]) and len(granted) == 11
    assert all(action.split(":")[0] in ("ssmmessages", "ec2messages") for action in channels["Action"])
    assert len(statements) == 4


def test_the_node_role_wildcard_is_reviewed_and_cdk_nag_has_no_open_finding(pcs) -> None:
    policy = pcs["cluster"].role.node.find_child("DefaultPolicy").node.default_child
    uses = [u for u in template_wildcards(pcs["template"].to_json()) if u.logical_id == logical_id(policy)]
    assert {(u.action, u.resource) for u in uses} == {(action, "*") for action in NODE_SSM_CHANNELS} | {
        ("ssm:UpdateInstanceInformation", "arn:aws:ec2:us-east-1:111111111111:instance/*")
    }
    assert {u.reason for u in uses} == {grant.reason for grant in NODE_SSM_GRANTS}
    report = nag_report(pcs["outdir"])
    assert report.violations == []
    assert not any("AmazonSSMManagedInstanceCore" in rule for rule, _ in report.acknowledged)


def test_every_node_group_keeps_the_imds_token_on_the_host(pcs) -> None:
    templates = pcs["template"].find_resources("AWS::EC2::LaunchTemplate")
    groups = [_group(pcs, name) for name in ("p5cb", "spot", "login")]
    for group in groups:
        options = templates[group["CustomLaunchTemplate"]["TemplateId"]["Ref"]]["Properties"]["LaunchTemplateData"][
            "MetadataOptions"
        ]
        assert (options["HttpTokens"], options["HttpPutResponseHopLimit"]) == ("required", 1)


def test_outputs_cluster_id_and_login_group(pcs) -> None:
    outputs = pcs["template"].find_outputs("*")
    values = {name: o["Value"] for name, o in outputs.items()}
    assert get_att(pcs["cluster"].cluster, "Id") in values.values()
    assert get_att(pcs["cluster"].login_group, "Id") in values.values()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"size": "HUGE"}, "size: got 'HUGE'; allowed: SMALL, MEDIUM, LARGE"),
        ({"compute_groups": []}, "compute_groups: got \\[\\]; allowed: at least one node group"),
        ({"ami_id": "image-1"}, "ami_id: got 'image-1'"),
        ({"login": PcsNodeGroup(name="p5cb", instance_type="m5.2xlarge")}, "node group names"),
    ],
)
def test_invalid_props_are_refused(pcs, change: dict, message: str) -> None:
    base = pcs["props"]
    kwargs = {f: getattr(base, f) for f in base.__dataclass_fields__} | change
    with pytest.raises(ValueError, match=message):
        PcsClusterProps(**kwargs)


def test_pcs_node_group_names_fit_pcs_and_change_only_with_what_pcs_cannot_change() -> None:
    rule = service_fact("pcs", "name_rules").value["compute_node_group"]
    longest = "a" + "b" * 23 + "c"
    for name in ("ab", "gpu", "login", longest, "abcdefghijklmnopq-stuvwxy"):
        pcs_name = node_group_name(name, ["p5.48xlarge"])
        assert rule["min"] <= len(pcs_name) <= rule["max"] and re.fullmatch(rule["pattern"], pcs_name), pcs_name
        assert pcs_name.startswith(name[: rule["max"] - NAME_DIGEST_LENGTH - 1].rstrip("-") + "-")
    assert node_group_name("gpu", ["p5.48xlarge"]) == node_group_name("gpu", ["p5.48xlarge"])
    assert node_group_name("gpu", ["p5.48xlarge"]) != node_group_name("gpu", ["p5e.48xlarge"])
    # Names that agree up to the cut still get different PCS names: the digest covers the whole name.
    assert node_group_name(longest, ["p5.48xlarge"]) != node_group_name(longest[:-1] + "d", ["p5.48xlarge"])
