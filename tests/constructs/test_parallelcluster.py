"""ParallelCluster: the official schema loads kiln's config; the provider and custom resource are wired."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from kiln.constructs import CapacityOption, LustreFileSystem, LustreFileSystemAttributes
from kiln.constructs.parallelcluster import PARALLELCLUSTER_VERSION, ParallelCluster, ParallelClusterProps, SlurmQueue
from tests.constructs.conftest import imported_vpc, logical_id, plain_bootstrap, stack
from tests.constructs.pcluster_schema import concrete, load_with_official_schema

CAPACITIES = {
    "on-demand": CapacityOption(),
    "spot": CapacityOption(type="spot"),
    "reservation": CapacityOption(type="reservation", reservation_id="cr-0abcdef0123456789"),
    "capacity-block": CapacityOption(type="capacity-block", reservation_id="cr-0123456789abcdef0"),
}
STORAGE = {"fsx": "fs-0123456789abcdef0", "no-fsx": None}


def build(capacity: str, fsx: str | None, login_count: int = 1):
    st = stack(f"Pc{capacity.title().replace('-', '')}{'Fsx' if fsx else 'NoFsx'}{login_count}")
    vpc = imported_vpc(st)
    clients = ec2.SecurityGroup(st, "LustreClients", vpc=vpc)
    bootstrap = plain_bootstrap(st, "on-node-configured.sh")
    count = 2 if capacity == "capacity-block" else 0
    cluster = ParallelCluster(
        st,
        "Cluster",
        ParallelClusterProps(
            cluster_name="llm-pcluster",
            subnet=vpc.private_subnets[0],
            bootstrap=bootstrap,
            cluster_env={"KILN_CLUSTER_NAME": "llm-pcluster", "KILN_REGION": st.region},
            queues=[
                SlurmQueue(
                    name="p5",
                    instance_type="p5.48xlarge",
                    min_count=count,
                    max_count=count or 4,
                    capacity=CAPACITIES[capacity],
                    placement_group=capacity in ("on-demand", "spot"),
                    root_volume_gib=512,
                ),
                SlurmQueue(name="cpu", instance_type="c5.4xlarge", max_count=2, placement_group=False),
            ],
            file_system=LustreFileSystem.from_lustre_attributes(
                st,
                "Fsx",
                LustreFileSystemAttributes(
                    file_system_id=fsx,
                    dns_name=f"{fsx}.fsx.us-east-1.amazonaws.com",
                    mount_name="abcdefgh",
                    security_group=clients,
                ),
            )
            if fsx
            else None,
            security_groups=[clients],
            login_count=login_count,
        ),
    )
    return cluster


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_official_schema_loads_the_config(capacity: str, storage: str) -> None:
    cluster = build(capacity, STORAGE[storage], login_count=0 if storage == "no-fsx" else 1)
    loaded = load_with_official_schema(concrete(Stack.of(cluster).resolve(cluster.config)), "llm-pcluster")
    p5 = loaded.scheduling.queues[0]
    assert (
        p5.capacity_type.value
        == {"on-demand": "ONDEMAND", "reservation": "ONDEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}[
            capacity
        ]
    )
    assert p5.compute_resources[0].efa.enabled is True
    assert loaded.scheduling.queues[1].compute_resources[0].efa.enabled is False
    assert bool(loaded.shared_storage) is (storage == "fsx")
    assert loaded.head_node.imds.secured is True


def test_the_parallelcluster_example_loads_with_the_official_schema(example_assemblies) -> None:
    template = example_assemblies["p5-parallelcluster"].templates()["llm-pcluster-compute"]
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    loaded = load_with_official_schema(concrete(resource["Properties"]["ClusterConfiguration"]), "llm-pcluster")
    assert [q.name for q in loaded.scheduling.queues] == ["p5", "debug"]
    assert loaded.scheduling.queues[0].capacity_reservation_target.capacity_reservation_id == "cr-0abcdef0123456789"


@pytest.fixture(scope="module")
def on_demand():
    cluster = build("on-demand", "fs-0123456789abcdef0")
    return cluster, Template.from_stack(Stack.of(cluster))


def test_provider_nested_stack_at_the_pinned_version(on_demand) -> None:
    cluster, template = on_demand
    (nested,) = template.find_resources("AWS::CloudFormation::Stack").values()
    url = nested["Properties"]["TemplateURL"]["Fn::Sub"]
    assert url == (
        "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
        f"/parallelcluster/{PARALLELCLUSTER_VERSION}/templates/custom_resource/cluster.yaml"
    )


def test_custom_resource_gets_name_config_and_deletion_policy(on_demand) -> None:
    cluster, template = on_demand
    (resource,) = template.find_resources("Custom::PclusterCluster").values()
    props = resource["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": [logical_id(cluster.provider), "Outputs.ServiceToken"]}
    assert (props["ClusterName"], props["DeletionPolicy"]) == ("llm-pcluster", "Delete")
    assert props["ClusterConfiguration"]["Scheduling"]["SlurmQueues"][0]["Networking"]["PlacementGroup"] == {
        "Enabled": True
    }


def test_every_node_runs_the_bootstrap_on_node_configured_and_may_read_only_it(on_demand) -> None:
    cluster, _ = on_demand
    config = Stack.of(cluster).resolve(cluster.config)
    actions = [config["HeadNode"]["CustomActions"]] + [q["CustomActions"] for q in config["Scheduling"]["SlurmQueues"]]
    for action in actions:
        assert action["OnNodeConfigured"]["Args"][1] == "on-node-configured.sh"
        assert action["OnNodeConfigured"]["Script"] == Stack.of(cluster).resolve(cluster.fetch_script.s3_object_url)
    keys = [a["KeyName"] for a in config["HeadNode"]["Iam"]["S3Access"]]
    assert keys == [cluster.fetch_script.s3_object_key, Stack.of(cluster).resolve(cluster.props.bootstrap.object_key)]
    assert all(a["EnableWriteAccess"] is False for a in config["HeadNode"]["Iam"]["S3Access"])


def test_head_node_ip_is_an_output(on_demand) -> None:
    cluster, template = on_demand
    outputs = template.find_outputs("*")
    (ip,) = [o for name, o in outputs.items() if name.startswith("ClusterHeadNodePrivateIp")]
    assert ip["Value"] == {"Fn::GetAtt": [logical_id(cluster.cluster.node.default_child), "headNode.privateIpAddress"]}


def test_config_is_a_plain_dict_users_can_read(on_demand) -> None:
    cluster, _ = on_demand
    assert isinstance(cluster.config, dict)
    assert cluster.config["Scheduling"]["Scheduler"] == "slurm"
    assert cluster.config["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] == "fs-0123456789abcdef0"


def test_installed_schema_is_the_pinned_version() -> None:
    assert version("aws-parallelcluster") == PARALLELCLUSTER_VERSION


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"capacity": CAPACITIES["capacity-block"], "min_count": 0, "max_count": 2},
            "equal and above 0 for a capacity block",
        ),
        ({"name": "GPU"}, "queue name: got 'GPU'"),
        ({"min_count": 3, "max_count": 1}, r"min_count/max_count: got \(3, 1\)"),
    ],
)
def test_bad_queues_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlurmQueue(**{"name": "gpu", "instance_type": "p5.48xlarge", **kwargs})
