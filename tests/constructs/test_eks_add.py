"""EksTrainingCluster's add_* methods, as a library user calls them: a node group added after construction is built as
one given in the props is (the constructor adds its own with the same method), and manifests, Helm charts, access
entries and Pod Identity roles land in the template."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from kiln.constructs import AcceleratedNodeGroup, EksTrainingCluster, EksTrainingClusterProps
from kiln.constructs.eks_addons import HelmAddon, PodIdentity
from kiln.contracts.backends import EKS_SYSTEM_NODE_GROUP
from kiln.stacks.app import new_app
from tests.support.constructs import ENV, efa_network, logical_id, synth_as_kiln

AZ = "us-east-1a"
GROUP = AcceleratedNodeGroup(name="p5", instance_type="p5.48xlarge", max_count=2)
CHART = HelmAddon(
    chart="metrics-server",
    repository="https://kubernetes-sigs.github.io/metrics-server/",
    version="3.12.2",
    namespace="kube-system",
    release="metrics-server",
)
WATCHER = PodIdentity(namespace="tools", service_account="watcher")
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "team", "namespace": "default"}}
ROLE_ARN = "arn:aws:iam::111111111111:role/viewer"


def _cluster(app: cdk.App, name: str, groups: list[AcceleratedNodeGroup]) -> EksTrainingCluster:
    """An EKS cluster in stack NAME with GROUPS in its props; no autoscaler or Kueue, which follow the props' groups."""
    st = cdk.Stack(app, name, env=ENV)
    network = efa_network(st, AZ)
    props = EksTrainingClusterProps(
        vpc=network.net.vpc,
        node_subnet=network.net.compute_subnet,
        efa_security_group=network.efa.security_group,
        accelerated_groups=groups,
        cluster_name="added",
        cluster_autoscaler=False,
        gang_scheduling=False,
    )
    return EksTrainingCluster(st, "Cluster", props)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two clusters: one with GROUP in its props, one that gets it from add_node_group, with the other add_* calls."""
    outdir = tmp_path_factory.mktemp("eks-add")
    app = new_app(str(outdir))
    given = _cluster(app, "Given", [GROUP])
    added = _cluster(app, "Added", [])
    nodegroup = added.add_node_group(GROUP)
    manifest = added.add_manifest("Team", CONFIG_MAP)
    chart = added.add_helm_chart("MetricsServer", CHART)
    viewer = eks.AccessPolicy.from_access_policy_name(
        "AmazonEKSViewPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
    )
    added.add_access("Viewer", ROLE_ARN, [viewer])
    statement = iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::team-bucket/config.json"])
    role, association = added.add_pod_identity("Watcher", WATCHER, statements=[statement])
    templates = synth_as_kiln(app, outdir, [given.node.scope, added.node.scope])
    return {
        "given": given,
        "added": added,
        "nodegroup": nodegroup,
        "manifest": manifest,
        "chart": chart,
        "role": role,
        "association": association,
        "given_template": templates["Given"].to_json(),
        "added_template": templates["Added"].to_json(),
    }


def _resource(template: dict, construct) -> dict:
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return template["Resources"][logical_id(construct)]


def test_a_node_group_added_later_is_built_as_a_props_group(built: dict) -> None:
    given, added = built["given"], built["added"]
    assert added.node_groups == {"p5": built["nodegroup"]} and set(added.launch_templates) == {"p5"}
    for pick in (lambda c: c.node_groups["p5"], lambda c: c.launch_templates["p5"].launch_template):
        ours, theirs = _resource(built["added_template"], pick(added)), _resource(built["given_template"], pick(given))
        # Same construct ids in both stacks: the same logical ids, properties and dependencies (the VPC CNI's Pod
        # Identity first, the cluster's version).
        assert ours == theirs
    group = _resource(built["added_template"], built["nodegroup"])
    assert group["Properties"]["Version"] == _resource(built["added_template"], added.cluster)["Properties"]["Version"]
    assert logical_id(added.cni_identity) in group["DependsOn"]


def test_add_manifest_helm_chart_access_and_pod_identity_reach_the_template(built: dict) -> None:
    template = built["added_template"]
    objects = json.loads(_resource(template, built["manifest"])["Properties"]["Manifest"])
    assert [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "default", "team")
    ]
    chart = _resource(template, built["chart"])["Properties"]
    assert (chart["Chart"], chart["Repository"], chart["Version"], chart["Namespace"]) == (
        CHART.chart,
        CHART.repository,
        CHART.version,
        CHART.namespace,
    )
    entries = Template.from_json(template).find_resources(
        "AWS::EKS::AccessEntry", {"Properties": {"PrincipalArn": ROLE_ARN}}
    )
    (entry,) = entries.values()
    (policy,) = entry["Properties"]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(policy["PolicyArn"]).endswith('cluster-access-policy/AmazonEKSViewPolicy"]]}')
    association = _resource(template, built["association"])["Properties"]
    assert (association["Namespace"], association["ServiceAccount"]) == ("tools", "watcher")
    assert association["RoleArn"] == {"Fn::GetAtt": [logical_id(built["role"].node.default_child), "Arn"]}
    role = _resource(template, built["role"])["Properties"]
    assert role["Policies"][0]["PolicyDocument"]["Statement"][0]["Action"] == "s3:GetObject"


@pytest.mark.parametrize("name", ["p5", EKS_SYSTEM_NODE_GROUP])
def test_add_node_group_refuses_a_name_taken_in_one_line(built: dict, name: str) -> None:
    with pytest.raises(ValueError, match=rf"node group name: got '{name}'; allowed: a name other than") as error:
        built["added"].add_node_group(AcceleratedNodeGroup(name=name, instance_type="p5.48xlarge", max_count=1))
    assert "\n" not in str(error.value)


def test_add_node_group_refuses_a_cluster_without_an_efa_security_group_in_one_line() -> None:
    st = cdk.Stack(new_app(), "NoEfa", env=ENV)
    network = efa_network(st, AZ)
    cluster = EksTrainingCluster(
        st, "Cluster", EksTrainingClusterProps(vpc=network.net.vpc, node_subnet=network.net.compute_subnet)
    )
    allowed = "a security group in the props to add an accelerated node group"
    with pytest.raises(
        ValueError, match=rf"^EksTrainingCluster\[NoEfa/Cluster\]\.efa_security_group: got None; allowed: {allowed}$"
    ):
        cluster.add_node_group(GROUP)
