"""PcsCluster on Trainium: one job per node (an exclusive queue) and the Neuron devices as GRES `neuron`."""

from __future__ import annotations

import copy
import json

import pytest
from aws_cdk import aws_ec2 as ec2

from kiln.catalog import instance_type
from kiln.catalog.names import NEURON_GRES
from kiln.catalog.platforms import at_least, pcs_slurm_versions, root_device_name, service_fact
from kiln.changes import plan
from kiln.constructs.pcs import (
    GroupSlurmSettings,
    PcsCluster,
    PcsClusterProps,
    PcsNodeGroup,
    exclusive_queue_setting,
    group_slurm_settings,
)
from kiln.metrics.slurm import parse_sinfo
from kiln.stacks.app import new_app
from kiln.stacks.synth import lint_template, nag_report
from tests.support.constructs import imported_vpc, logical_id, plain_bootstrap, stack, synth_as_kiln

GRES = service_fact("pcs", "gres_settings").value
EXCLUSIVE = service_fact("pcs", "exclusive_queue").value
NEURON_TYPES = ("trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "inf2.48xlarge")


@pytest.fixture(scope="module")
def trn(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("pcs-neuron-assembly")
    app = new_app(str(outdir))
    st = stack("PcsNeuron", app)
    vpc = imported_vpc(st)
    props = PcsClusterProps(
        vpc=vpc,
        subnet=vpc.private_subnets[0],
        efa_security_group=ec2.SecurityGroup(st, "Efa", vpc=vpc),
        ami_id="ami-0123456789abcdef0",
        root_device_name=root_device_name("al2023"),
        compute_groups=[
            PcsNodeGroup(name="trn1", instance_type="trn1.32xlarge", max_count=4),
            PcsNodeGroup(name="gpu", instance_type="p5.48xlarge", max_count=2),
        ],
        login=PcsNodeGroup(name="login", instance_type="m5.2xlarge", min_count=1, max_count=1),
        bootstrap=plain_bootstrap(st),
        cluster_env={"KILN_CLUSTER_NAME": "trn-pcs", "KILN_REGION": "us-east-1"},
        slurm_version="25.11",
    )
    cluster = PcsCluster(st, "Cluster", props)
    return {"cluster": cluster, "template": synth_as_kiln(app, outdir, [st])["PcsNeuron"], "outdir": outdir}


def _properties(trn, kind: str, construct) -> dict:
    return trn["template"].find_resources(kind)[logical_id(construct)]["Properties"]


def test_a_trainium_node_group_declares_its_devices_as_gres_neuron(trn) -> None:
    group = _properties(trn, "AWS::PCS::ComputeNodeGroup", trn["cluster"].node_groups["trn1"])
    devices = instance_type("trn1.32xlarge").neuron_count
    assert devices == 16
    assert group["SlurmConfiguration"] == {
        "GresCustomSettings": [{"Name": "neuron", "File": "/dev/neuron[0-15]"}],
        "SlurmCustomSettings": [{"ParameterName": GRES["node_setting"], "ParameterValue": "neuron:16"}],
    }


def test_a_trainium_queue_gives_each_job_whole_nodes(trn) -> None:
    queue = _properties(trn, "AWS::PCS::Queue", trn["cluster"].queues["trn1"])
    assert queue["Name"] == "trn1"
    assert queue["SlurmConfiguration"] == {
        "SlurmCustomSettings": [{"ParameterName": "OverSubscribe", "ParameterValue": "EXCLUSIVE"}]
    }


def test_gpu_and_login_groups_and_the_gpu_queue_are_left_to_pcs(trn) -> None:
    cluster = trn["cluster"]
    for construct in (cluster.node_groups["gpu"], cluster.login_group):
        assert "SlurmConfiguration" not in _properties(trn, "AWS::PCS::ComputeNodeGroup", construct)
    assert "SlurmConfiguration" not in _properties(trn, "AWS::PCS::Queue", cluster.queues["gpu"])


def test_the_template_passes_cfn_lint_and_cdk_nag(trn) -> None:
    path = trn["outdir"] / "PcsNeuron.template.json"
    assert json.loads(path.read_text())["Resources"]
    assert lint_template(path, "us-east-1") == ([], [])
    assert nag_report(trn["outdir"]).violations == []


@pytest.mark.parametrize("version", sorted(pcs_slurm_versions()))
def test_every_pcs_version_kiln_offers_has_an_exclusive_queue_and_gres_only_where_documented(version: str) -> None:
    settings = group_slurm_settings("trn1.32xlarge", version)
    assert settings.queue == {"OverSubscribe": "EXCLUSIVE"}
    documented = at_least(version, GRES["from_version"])
    assert bool(settings.gres) is documented and bool(settings.node) is documented


def test_from_slurm_26_05_the_queue_takes_exclusive_node() -> None:
    assert exclusive_queue_setting("26.05") == ("Exclusive", "NODE")
    assert exclusive_queue_setting("25.11") == ("OverSubscribe", "EXCLUSIVE")
    assert [entry["from_version"] for entry in EXCLUSIVE] == ["24.11", "26.05"]
    with pytest.raises(ValueError, match="older than every PCS exclusive-queue setting"):
        exclusive_queue_setting("23.11")


@pytest.mark.parametrize("name", NEURON_TYPES)
def test_the_gres_kiln_declares_keeps_pcs_rules(name: str) -> None:
    """PCS refuses a Gres entry naming an undeclared resource or more of it than the records declare, and takes only
    its listed gres.conf attributes (platforms.json, pcs.gres_settings)."""
    settings = group_slurm_settings(name, "25.11")
    devices = instance_type(name).neuron_count
    (record,) = settings.gres
    assert set(record) <= set(GRES["record_attributes"])
    assert record["Name"] == NEURON_GRES
    assert record["File"] == f"/dev/neuron[0-{devices - 1}]"
    assert settings.node == {GRES["node_setting"]: f"{NEURON_GRES}:{devices}"}


def test_types_without_neuron_devices_get_nothing() -> None:
    for name in ("p5.48xlarge", "g5.12xlarge", "m5.2xlarge"):
        assert group_slurm_settings(name, "25.11") == GroupSlurmSettings()


def test_kiln_metrics_counts_the_gres_pcs_declares() -> None:
    """sinfo prints a node's Gres as PCS's Gres setting names it; kiln-metrics counts that name as Neuron devices."""
    gres = group_slurm_settings("trn1.32xlarge", "25.11").node[GRES["node_setting"]]
    (row,) = parse_sinfo(f"trn1-1|trn1|mixed|0/128/0/128|{gres}|{NEURON_GRES}:0|none\n")
    assert (row.neuron_devices, row.neuron_devices_allocated) == (16, 0)


def test_upgrading_a_trainium_cluster_updates_its_node_group_and_queue_in_place(trn) -> None:
    """A cluster deployed before this release had neither setting: kiln's plan of the deploy (kiln diff, from
    CloudFormation's create-only properties) updates the node group and the queue, replacing nothing."""
    after = trn["template"].to_json()
    before = copy.deepcopy(after)
    for resource in before["Resources"].values():
        if resource["Type"] in ("AWS::PCS::ComputeNodeGroup", "AWS::PCS::Queue"):
            resource["Properties"].pop("SlurmConfiguration", None)
    result = plan({"PcsNeuron": before}, {"PcsNeuron": after}, region="us-east-1")
    assert result.findings() == []
    cluster = trn["cluster"]
    actions = dict(result.actions["PcsNeuron"])
    assert actions[logical_id(cluster.node_groups["trn1"])] == "update"
    assert actions[logical_id(cluster.queues["trn1"])] == "update"
    assert actions[logical_id(cluster.node_groups["gpu"])] == "same"
