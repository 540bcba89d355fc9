"""ParallelCluster day two: every setting kiln writes has its update policy from ParallelCluster's own schema, and
update_refusals refuses exactly what ParallelCluster's update of a cluster in use refuses.

ParallelCluster's own check (pcluster.config.config_patch.ConfigPatch, what the provider's update runs) judges each
case against a cluster whose compute fleet and login nodes run. tests/stacks/test_parallelcluster_updates.py takes
the spec through the changes issue 33 names."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from aws_cdk import CfnParameter, Stack
from aws_cdk import aws_iam as iam

from kiln.catalog.platforms import service_fact
from kiln.changes.parallelcluster import UPDATE_POLICIES, update_refusals
from kiln.constructs.parallelcluster import AMI_SETTINGS, ParallelCluster, SlurmQueue, attachable_policy
from tests.support.parallelcluster import (
    CAPACITIES,
    build,
    build_props,
    kilns_verdict,
    parallelclusters_verdict,
)

# ---- The table: each setting kiln writes, with the update policy the installed schema declares for it. ----


def schema_policies(config: dict) -> dict[str, str]:
    """Return {path: update policy name} for every setting in CONFIG, read from the installed pcluster schema."""
    from pcluster.config.update_policy import UpdatePolicy
    from pcluster.schemas.cluster_schema import ClusterSchema

    found: dict[str, str] = {}

    def walk(schema: Any, section: dict, prefix: str) -> None:
        fields = {f.data_key: f for f in schema.declared_fields.values()}
        for key, value in section.items():
            assert key in fields, f"{prefix}/{key}: not a setting of ParallelCluster's schema"
            setting = fields[key]
            # A setting without one is UNSUPPORTED, as ParallelCluster's ConfigPatch takes it.
            policy = setting.metadata.get("update_policy", UpdatePolicy.UNSUPPORTED).name
            path = f"{prefix}/{key}".lstrip("/")
            if hasattr(setting, "nested") and getattr(setting, "many", False):
                item_key = setting.metadata["update_key"]
                found[f"{path}[{item_key}]"] = policy
                for item in value:
                    walk(setting.schema, item, f"{path}[{item_key}]")
            elif hasattr(setting, "nested"):
                found[path] = policy
                walk(setting.schema, value, path)
            else:
                found[path] = policy

    walk(ClusterSchema(cluster_name="llm-pcluster"), config, "")
    return found


@pytest.fixture(scope="module")
def written() -> dict[str, str]:
    """Every setting kiln writes across its kinds of cluster (each capacity, FSx, login pool, head node policies,
    timeouts, a custom AMI and the queues' own, a permissions boundary, tags, health checks), with its policy from the
    installed schema."""
    paths: dict[str, str] = {}
    for capacity in CAPACITIES:
        st, base = build_props(capacity, "fs-0123456789abcdef0", login_count=1)
        extra = attachable_policy(
            st, "Extra", statements=[iam.PolicyStatement(actions=["s3:ListBucket"], resources=["*"])]
        )
        props = dataclasses.replace(
            base,
            head_node_policies=[extra],
            bootstrap_timeouts={"HeadNodeBootstrapTimeout": 3000, "ComputeNodeBootstrapTimeout": 3000},
            custom_ami="ami-0123456789abcdef0",
            compute_ami="ami-0fedcba9876543210",
            permissions_boundary="arn:aws:iam::111111111111:policy/kiln-permissions-boundary",
            tags={"kiln:cluster": "llm-pcluster", "team": "ml"},
            # resilience: kiln's check as Slurm's HealthCheckProgram, ParallelCluster's GPU check on the p5 queue.
            health_check_interval_s=300,
            gpu_health_checks=True,
            # A Neuron queue: whole nodes per job (JobExclusiveAllocation).
            queues=[*base.queues, SlurmQueue(name="trn1", instance_type="trn1.32xlarge", max_count=2)],
        )
        paths |= schema_policies(st.resolve(ParallelCluster(st, "Full", props).config))
    return paths


def test_every_setting_kiln_writes_has_the_update_policy_parallelclusters_schema_declares(written) -> None:
    assert written == UPDATE_POLICIES
    # The ones this issue is about: a head node's OnNodeConfigured never changes; a queue's only with a strategy.
    assert UPDATE_POLICIES["HeadNode/CustomActions/OnNodeConfigured/Script"] == "UNSUPPORTED"
    assert UPDATE_POLICIES["LoginNodes/Pools[Name]/CustomActions/OnNodeConfigured/Args"] == "UNSUPPORTED"
    assert UPDATE_POLICIES["Scheduling/SlurmQueues[Name]/CustomActions/OnNodeConfigured/Script"] == (
        "QUEUE_UPDATE_STRATEGY"
    )


def schema_policy(path: str) -> str:
    """Return the update policy the installed schema declares for the setting at PATH (list items as List[Key])."""
    from pcluster.config.update_policy import UpdatePolicy
    from pcluster.schemas.cluster_schema import ClusterSchema

    schema: Any = ClusterSchema(cluster_name="llm-pcluster")
    for key in path.split("/"):
        fields = {f.data_key: f for f in schema.declared_fields.values()}
        setting = fields[key.split("[", 1)[0]]
        schema = getattr(setting, "schema", None)
    return setting.metadata.get("update_policy", UpdatePolicy.UNSUPPORTED).name


def schema_ami_paths() -> set[str]:
    """Return the path of every CustomAmi setting in the installed schema (list items as List[Key])."""
    from pcluster.schemas.cluster_schema import ClusterSchema

    found: set[str] = set()

    def walk(schema: Any, prefix: str) -> None:
        for setting in schema.declared_fields.values():
            path = f"{prefix}/{setting.data_key}".lstrip("/")
            if setting.data_key == "CustomAmi":
                found.add(path)
            nested = getattr(setting, "schema", None)
            if nested is not None and hasattr(nested, "declared_fields"):
                many = getattr(setting, "many", False)
                walk(nested, f"{path}[{setting.metadata['update_key']}]" if many else path)

    walk(ClusterSchema(cluster_name="llm-pcluster"), "")
    return found


def test_each_place_an_ami_is_set_has_the_update_policy_parallelclusters_schema_declares() -> None:
    # Every place: the cluster's image, the head node's, each login pool's and each queue's.
    assert set(AMI_SETTINGS) == schema_ami_paths()
    assert {path: schema_policy(path) for path in AMI_SETTINGS} == AMI_SETTINGS
    # The one an update takes while nodes run: a queue's, under its QueueUpdateStrategy (kiln's DRAIN).
    running = {path for path, policy in AMI_SETTINGS.items() if policy == "QUEUE_UPDATE_STRATEGY"}
    assert running == {"Scheduling/SlurmQueues[Name]/Image/CustomAmi"}
    # kiln writes the cluster's image (head and login nodes) and the queues' own, never a head node's or pool's.
    assert {path: UPDATE_POLICIES[path] for path in AMI_SETTINGS if path in UPDATE_POLICIES} == {
        "Image/CustomAmi": "UNSUPPORTED",
        "Scheduling/SlurmQueues[Name]/Image/CustomAmi": "QUEUE_UPDATE_STRATEGY",
    }


def test_a_custom_ami_read_at_deploy_is_refused() -> None:
    """Image/CustomAmi is UNSUPPORTED: a value that may change between deploys belongs in compute_ami."""
    st, props = build_props("on-demand", None, login_count=0)
    image = CfnParameter(st, "Image", type="AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>")
    with pytest.raises(
        ValueError, match=r"custom_ami: got .*allowed: a literal AMI id: .*\(UNSUPPORTED\).*compute_ami"
    ):
        dataclasses.replace(props, custom_ami=image.value_as_string)
    assert dataclasses.replace(props, compute_ami=image.value_as_string).compute_ami == image.value_as_string


def test_every_policy_in_the_table_is_one_parallelcluster_defines_and_kiln_judges() -> None:
    from pcluster.config.update_policy import UpdatePolicy

    defined = {p.name for p in vars(UpdatePolicy).values() if isinstance(p, UpdatePolicy)}
    conditions = service_fact("parallelcluster", "update_policy_conditions").value
    assert set(UPDATE_POLICIES.values()) <= set(conditions) <= defined


# ---- update_refusals against ParallelCluster's own check, on a cluster in use. ----


def _queue(config: dict, name: str) -> dict:
    return next(q for q in config["Scheduling"]["SlurmQueues"] if q["Name"] == name)


def _resource(config: dict, queue: str) -> dict:
    return _queue(config, queue)["ComputeResources"][0]


# Each change: what it does to a config kiln wrote, and how many lines update_refusals gives it (0: it deploys).
CHANGES = {
    "queue instance type": (lambda c: _resource(c, "p5").update(InstanceType="p5en.48xlarge"), 1),
    "head node instance type": (lambda c: c["HeadNode"].update(InstanceType="m5.4xlarge"), 1),
    "more nodes": (lambda c: _resource(c, "p5").update(MaxCount=8), 0),
    "fewer nodes": (lambda c: _resource(c, "p5").update(MaxCount=2), 1),
    "more static nodes alone": (lambda c: _resource(c, "cpu").update(MinCount=1), 1),
    "more static and maximum nodes": (lambda c: _resource(c, "cpu").update(MinCount=1, MaxCount=3), 0),
    "queue root volume": (
        lambda c: _queue(c, "p5")["ComputeSettings"]["LocalStorage"]["RootVolume"].update(Size=600),
        0,
    ),
    "queue bootstrap arguments": (
        lambda c: _queue(c, "p5")["CustomActions"]["OnNodeConfigured"]["Args"].append("x"),
        0,
    ),
    "head bootstrap arguments": (lambda c: c["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Args"].append("x"), 1),
    "no placement group": (lambda c: _queue(c, "p5")["Networking"]["PlacementGroup"].update(Enabled=False), 1),
    "a new queue": (
        lambda c: c["Scheduling"]["SlurmQueues"].append({**copy.deepcopy(_queue(c, "cpu")), "Name": "more"}),
        0,
    ),
    "a queue removed": (lambda c: c["Scheduling"]["SlurmQueues"].pop(), 1),
    "login instance type": (lambda c: c["LoginNodes"]["Pools"][0].update(InstanceType="m5.4xlarge"), 1),
    "login count": (lambda c: c["LoginNodes"]["Pools"][0].update(Count=2), 0),
    "another file system": (
        lambda c: c["SharedStorage"][0]["FsxLustreSettings"].update(FileSystemId="fs-0fedcba9876543210"),
        1,
    ),
    "the file system under a new name": (
        lambda c: c["SharedStorage"][0].update(Name="fsx2", FsxLustreSettings={"FileSystemId": "fs-0fedcba98765432"}),
        0,
    ),
    "idle time": (lambda c: c["Scheduling"]["SlurmSettings"].update(ScaledownIdletime=20), 1),
    "compute timeout": (lambda c: c["DevSettings"]["Timeouts"].update(ComputeNodeBootstrapTimeout=3000), 0),
    "head timeout": (lambda c: c["DevSettings"]["Timeouts"].update(HeadNodeBootstrapTimeout=3000), 1),
    "a queue's own image": (lambda c: _queue(c, "p5").update(Image={"CustomAmi": "ami-0fedcba9876543210"}), 0),
    # What this kiln release does to a Trainium queue of a running cluster: whole nodes per job, no drain needed.
    "a queue made exclusive": (lambda c: _queue(c, "cpu").update(JobExclusiveAllocation=True), 0),
    "the cluster's image": (lambda c: c["Image"].update(CustomAmi="ami-0fedcba9876543210"), 1),
    "head node policy": (
        lambda c: c["HeadNode"]["Iam"]["AdditionalIamPolicies"].append(
            {"Policy": "arn:aws:iam::1:policy/parallelcluster/x"}
        ),
        0,
    ),
}


@pytest.fixture(scope="module")
def in_use() -> dict:
    """The on-demand cluster's config with FSx and a login pool, deploy-time values as the template writes them
    (each compares as itself, as the deployed value it stands for would)."""
    cluster = build("on-demand", "fs-0123456789abcdef0", login_count=1)
    config = Stack.of(cluster).resolve(cluster.config)
    # kiln sets both timeouts on every cluster (kiln.node_config.budget.parallelcluster_timeouts).
    return {
        **config,
        "DevSettings": {"Timeouts": {"HeadNodeBootstrapTimeout": 2100, "ComputeNodeBootstrapTimeout": 2100}},
    }


@pytest.mark.parametrize("name", CHANGES)
def test_kiln_refuses_exactly_what_parallelclusters_update_refuses(in_use: dict, name: str) -> None:
    change, expected = CHANGES[name]
    after = copy.deepcopy(in_use)
    change(after)
    allowed, refused = parallelclusters_verdict(in_use, after)
    lines, named = kilns_verdict(in_use, after)
    assert named == refused, lines
    assert (lines == []) is allowed
    assert len(lines) == expected, lines


def test_without_a_queue_update_strategy_a_queue_change_needs_the_fleet_stopped(in_use: dict) -> None:
    after = copy.deepcopy(in_use)
    after["Scheduling"]["SlurmSettings"].pop("QueueUpdateStrategy")
    _queue(after, "p5")["ComputeSettings"]["LocalStorage"]["RootVolume"]["Size"] = 600
    allowed, refused = parallelclusters_verdict(in_use, after)
    [line] = update_refusals(in_use, after, "llm-pcluster")
    assert not allowed and refused == {"Scheduling/SlurmQueues[p5]/ComputeSettings/LocalStorage/RootVolume/Size"}
    assert line == (
        "ParallelCluster llm-pcluster: Scheduling/SlurmQueues[p5]/ComputeSettings/LocalStorage/RootVolume/Size "
        "512 -> 600: update policy QUEUE_UPDATE_STRATEGY; stop the compute fleet first (pcluster "
        "update-compute-fleet --cluster-name llm-pcluster --status STOP_REQUESTED), deploy, then start it "
        "(--status START_REQUESTED)"
    )


def test_a_login_pool_is_added_to_a_cluster_that_had_none(in_use: dict) -> None:
    before = copy.deepcopy(in_use)
    before.pop("LoginNodes")
    assert parallelclusters_verdict(before, in_use)[0] is True
    assert update_refusals(before, in_use, "llm-pcluster") == []


def test_a_setting_kiln_has_no_policy_for_is_refused(in_use: dict) -> None:
    after = copy.deepcopy(in_use)
    after["HeadNode"]["Dcv"] = {"Enabled": True}
    [line] = update_refusals(in_use, after, "llm-pcluster")
    assert line == (
        "ParallelCluster llm-pcluster: HeadNode/Dcv added: update policy unknown; kiln knows no update policy for "
        "this setting: keep it, or delete the cluster and deploy anew"
    )
