"""What outlives a stack, and what kiln makes only when something uses it."""

from __future__ import annotations

import copy
import functools
import json

import pytest
import yaml
from aws_cdk.assertions import Template

from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster, environment, new_app
from kiln.stacks.ci_mode import ci_environment, environment_spec
from kiln.stacks.compute_context import ComputeContext
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack
from tests.support import retention_walk
from tests.support.paths import ROOT
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow


def _stacks(example: str, **changes):
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return build_cluster(new_app(), parse_spec(data), nag=False)


@pytest.mark.parametrize(("deployment", "policy"), [("SCRATCH_2", "Delete"), ("PERSISTENT_2", "Retain")])
def test_only_a_persistent_file_system_outlives_the_stack(deployment: str, policy: str) -> None:
    stacks = _stacks("quickstart.yaml", storage__lustre__deployment=deployment)
    (fs,) = Template.from_stack(stacks.storage).find_resources("AWS::FSx::FileSystem").values()
    assert fs["DeletionPolicy"] == policy


@pytest.mark.parametrize(
    ("example", "placement_groups"),
    [
        ("quickstart.yaml", 1),  # PCS, on-demand EFA group
        ("p5-pcs.yaml", 0),  # a capacity block places the nodes itself
        ("p5-eks.yaml", 1),
        ("p5-parallelcluster.yaml", 0),  # ParallelCluster makes its own
        ("p5-hyperpod-slurm.yaml", 0),
    ],
)
def test_placement_groups_exist_only_where_node_groups_use_them(example: str, placement_groups: int) -> None:
    stacks = _stacks(example)
    # In the compute stack, beside the launch templates that name them (tests/stacks/test_placement_groups.py).
    Template.from_stack(stacks.compute).resource_count_is("AWS::EC2::PlacementGroup", placement_groups)
    Template.from_stack(stacks.network).resource_count_is("AWS::EC2::PlacementGroup", 0)


# Data's lifecycle: what `cdk destroy` keeps, and that nothing kept needs anything deleted (issue 33, item 1).
ATTACH_NETWORK = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}
ATTACHED_LUSTRE = {
    "file_system_id": "fs-0123456789abcdef0",
    "mount_name": "abcdefgh",
    "security_group_id": "sg-0123456789abcdef0",
}


def _data_spec(lustre: dict | None = None, **more) -> dict:
    """Return MINIMAL_SPEC with LUSTRE as storage.lustre and MORE merged in at the top."""
    data = copy.deepcopy(MINIMAL_SPEC)
    data["storage"] = {"lustre": lustre} if lustre is not None else {}
    data["observability"] = {"prometheus": True}
    data["compute"]["login_nodes"] = {"count": 1}
    for key, value in more.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


@functools.cache
def _data_templates(text: str) -> tuple[dict[str, dict], StorageStack]:
    """Return the network and storage templates of the spec in TEXT (JSON), and the storage stack."""
    spec = parse_spec(json.loads(text))
    app = new_app()
    network = NetworkStack(app, "t-network", spec=spec, env=environment(spec))
    storage = StorageStack(app, "t-storage", spec=spec, network=network, env=environment(spec))
    return {s.stack_name: Template.from_stack(s).to_json() for s in (network, storage)}, storage


def _templates(data: dict) -> dict[str, dict]:
    return _data_templates(json.dumps(data, sort_keys=True))[0]


def _kept_types(templates: dict[str, dict]) -> dict[str, list[str]]:
    """Return the types of the kept resources per stack, sorted."""
    kept = {stack: [] for stack in templates}
    for stack, logical_id in retention_walk.kept(templates):
        kept[stack].append(templates[stack]["Resources"][logical_id]["Type"])
    return {stack: sorted(types) for stack, types in kept.items()}


PERSISTENT = {"deployment": "PERSISTENT_2", "storage_gib": 2400}
KEPT_DATA = [
    "AWS::APS::Workspace",
    "AWS::KMS::Key",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
    "AWS::S3::Bucket",
    "AWS::S3::BucketPolicy",
    "AWS::S3::BucketPolicy",
]
KEPT_FILE_SYSTEM = [
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::SecurityGroup",
    # FSx's page: the file servers' group admits itself and the clients', the clients' group itself and the file
    # servers', each on TCP 988 and 1018-1023 (platforms.json, fsx_lustre.security_group_rules).
    *["AWS::EC2::SecurityGroupIngress"] * 8,
    "AWS::FSx::DataRepositoryAssociation",
    "AWS::FSx::FileSystem",
]
KEPT_FLOW_LOGS = ["AWS::KMS::Key", "AWS::Logs::LogGroup"]
KEPT_HOME = ["AWS::EC2::Subnet", "AWS::EC2::VPC"]
KEPT_EFA_GROUP = ["AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupEgress", "AWS::EC2::SecurityGroupIngress"]


@pytest.mark.parametrize(
    ("lustre", "network", "storage"),
    [
        # A kept persistent file system keeps its groups, their rules and its S3 link; its VPC and subnet stay.
        (PERSISTENT, KEPT_FLOW_LOGS + KEPT_HOME, KEPT_DATA + KEPT_FILE_SYSTEM),
        # EFA-enabled, its interfaces carry the EFA group too.
        ({**PERSISTENT, "efa": True}, KEPT_FLOW_LOGS + KEPT_HOME + KEPT_EFA_GROUP, KEPT_DATA + KEPT_FILE_SYSTEM),
        # Scratch holds no durable copy: it goes, and the network with it.
        ({"deployment": "SCRATCH_2", "storage_gib": 1200}, KEPT_FLOW_LOGS, KEPT_DATA),
        (None, KEPT_FLOW_LOGS, KEPT_DATA),
    ],
    ids=["persistent", "persistent-efa", "scratch", "no-lustre"],
)
def test_destroy_keeps_the_data_and_exactly_what_it_needs(lustre, network: list[str], storage: list[str]) -> None:
    templates = _templates(_data_spec(lustre))
    assert _kept_types(templates) == {"t-network": sorted(network), "t-storage": sorted(storage)}
    assert retention_walk.kept_needing_deleted(templates) == {}


def test_a_kept_file_system_keeps_the_subnet_of_its_interfaces_and_nothing_that_only_bills() -> None:
    templates = _templates(_data_spec({**PERSISTENT, "efa": True}))
    network = templates["t-network"]["Resources"]
    (fs,) = (r for r in templates["t-storage"]["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem")
    ((_, subnet_export),) = [next(iter(s.items())) for s in fs["Properties"]["SubnetIds"]]
    subnet = templates["t-network"]["Outputs"][subnet_export.split(":")[1]]["Value"]["Ref"]
    assert network[subnet]["DeletionPolicy"] == "Retain"
    for kind in ("AWS::EC2::NatGateway", "AWS::EC2::EIP", "AWS::EC2::InternetGateway", "AWS::EC2::Route"):
        assert all(r.get("DeletionPolicy") != "Retain" for r in network.values() if r["Type"] == kind), kind
    # Only the subnet that holds the interfaces stays.
    kept_subnets = [r for r in network.values() if r["Type"] == "AWS::EC2::Subnet" and "DeletionPolicy" in r]
    assert len(kept_subnets) == 1


def test_retain_false_keeps_nothing() -> None:
    data = _data_spec(PERSISTENT)
    data["storage"]["bucket"] = {"retain": False}
    templates = _templates(data)
    assert _kept_types(templates) == {"t-network": KEPT_FLOW_LOGS, "t-storage": []}


def test_an_attached_bucket_and_file_system_are_referred_to_never_created() -> None:
    data = _data_spec(ATTACHED_LUSTRE, network=ATTACH_NETWORK)
    data["storage"]["bucket"] = {"name": "team-datasets", "existing": True}
    templates, storage = _data_templates(json.dumps(data, sort_keys=True))
    resources = templates["t-storage"]["Resources"]
    types = {r["Type"] for r in resources.values()}
    assert not types & {"AWS::S3::Bucket", "AWS::FSx::FileSystem", "AWS::EC2::SecurityGroup"}
    assert not types & {"AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"}
    outputs = {k: v["Value"] for k, v in templates["t-storage"]["Outputs"].items()}
    assert outputs["BucketName"] == "team-datasets"
    assert outputs["FileSystemId"] == "fs-0123456789abcdef0"
    assert outputs["FileSystemMountName"] == "abcdefgh"
    # The DNS name FSx gives the id (platforms.json services.fsx_lustre.dns_name), in the spec's region.
    assert outputs["FileSystemDnsName"] == "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
    assert storage.lustre_clients.security_group_id == "sg-0123456789abcdef0"
    # Nodes get the attached file system's name and mount name in cluster.env.
    env = ComputeContext(spec=parse_spec(data), network=None, storage=storage).cluster_env(mounts_fsx=True)
    assert (env["KILN_FSX_DNS"], env["KILN_FSX_MOUNT_NAME"], env["KILN_BUCKET"]) == (
        "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "abcdefgh",
        "team-datasets",
    )


def test_the_walk_finds_a_kept_resource_that_needs_a_deleted_one() -> None:
    network = {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC"},
            "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}}},
        },
        "Outputs": {"SubnetOut": {"Value": {"Ref": "Subnet"}, "Export": {"Name": "net:SubnetOut"}}},
    }
    storage = {
        "Resources": {
            "Group": {"Type": "AWS::EC2::SecurityGroup", "DeletionPolicy": "Retain"},
            "Fs": {
                "Type": "AWS::FSx::FileSystem",
                "DeletionPolicy": "Retain",
                "Properties": {
                    "SubnetIds": [{"Fn::ImportValue": "net:SubnetOut"}],
                    "SecurityGroupIds": [{"Fn::GetAtt": ["Group", "GroupId"]}],
                    "Note": {"Fn::Sub": "${Link}"},
                },
            },
            "Link": {"Type": "AWS::FSx::DataRepositoryAssociation"},
        }
    }
    templates = {"net": network, "storage": storage}
    assert retention_walk.kept_needing_deleted(templates) == {
        ("storage", "Fs"): {("net", "Subnet"), ("storage", "Link")}
    }
    network["Resources"]["Subnet"]["DeletionPolicy"] = "Retain"
    storage["Resources"]["Link"]["DeletionPolicy"] = "Retain"
    assert retention_walk.kept_needing_deleted(templates) == {("net", "Subnet"): {("net", "Vpc")}}


@pytest.mark.parametrize("example", ["p5-pcs.yaml", "p5-parallelcluster.yaml", "p5-hyperpod-slurm.yaml"])
def test_across_a_whole_clusters_stacks_nothing_kept_needs_anything_deleted(example: str) -> None:
    stacks = _stacks(example)
    templates = {s.stack_name: Template.from_stack(s).to_json() for s in stacks.all()}
    kept = retention_walk.kept(templates)
    assert any(templates[stack]["Resources"][lid]["Type"] == "AWS::FSx::FileSystem" for stack, lid in kept)
    assert retention_walk.kept_needing_deleted(templates) == {}


def test_a_storage_stack_that_only_attaches_holds_a_no_op_so_cloudformation_takes_it() -> None:
    data = _data_spec(ATTACHED_LUSTRE, network=ATTACH_NETWORK)
    data["storage"]["bucket"] = {"name": "team-datasets", "existing": True}
    del data["observability"]
    resources = _templates(data)["t-storage"]["Resources"]
    assert [r["Type"] for r in resources.values()] == ["AWS::CloudFormation::WaitConditionHandle"]
    # With anything to make, no stand-in.
    data["observability"] = {"prometheus": True}
    types = {r["Type"] for r in _templates(data)["t-storage"]["Resources"].values()}
    assert "AWS::APS::Workspace" in types and "AWS::CloudFormation::WaitConditionHandle" not in types


def test_a_short_lived_environment_names_its_own_bucket_even_where_the_spec_attaches_one() -> None:
    spec = parse_spec(_data_spec(PERSISTENT) | {"storage": {"bucket": {"name": "team-datasets", "existing": True}}})
    ci = ci_environment(spec, name="t-pr1")
    built = environment_spec(spec, ci)
    app = new_app()
    network = NetworkStack(app, "t-pr1-network", spec=built, ci=ci, env=environment(built))
    storage = StorageStack(app, "t-pr1-storage", spec=built, network=network, ci=ci, env=environment(built))
    buckets = Template.from_stack(storage).find_resources("AWS::S3::Bucket")
    names = {storage.resolve(r["Properties"]["BucketName"])["Fn::Join"][1][0] for r in buckets.values()}
    assert names == {"t-pr1-data-", "t-pr1-data-logs-"}
