"""EksObservability: pinned exporter charts, the AMP collector's source, destination, roles and scrape jobs; a stack of
a workspace and a collector passes cfn-lint, cdk-nag and checkov as kiln's stacks must."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from kiln.constructs import (
    AcceleratedNodeGroup,
    EksObservability,
    EksObservabilityProps,
    EksTrainingCluster,
    EksTrainingClusterProps,
    PrometheusWorkspace,
    PrometheusWorkspaceProps,
    SystemNodeGroup,
    TrainingVpc,
    TrainingVpcProps,
    acknowledgements,
)
from kiln.constructs._checks import PropError
from kiln.constructs.eks_observability import (
    DCGM_EXPORTER,
    EFA_EXPORTER_PORT,
    GPU_NODE_SELECTOR,
    MONITORING_NAMESPACE,
    NODE_EXPORTER,
    SCRAPER_PRINCIPAL,
    scrape_config,
)
from kiln.review.scan import run_checkov
from kiln.stacks.app import new_app
from kiln.stacks.synth import lint_template, nag_report
from tests.support.constructs import ENV, efa_network, get_att, logical_id, ref, synth_as_kiln

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

REGION = "us-east-1"
AZ = "us-east-1a"
IMPORTED_ARN = "arn:aws:aps:us-east-1:111111111111:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
IMPORTED_ENDPOINT = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef/"
STACKS = ("Observed", "ObservedCpu")
# The kubectl handler of a cluster made elsewhere (its Lambda function's ARN).
KUBECTL_HANDLER = "arn:aws:lambda:us-east-1:111111111111:function:kubectl"


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Synthesize once, with cdk-nag on and kiln's template aspects: a GPU cluster with every exporter and its own
    workspace, and a CPU-only cluster writing to a disposable workspace without an EFA job."""
    outdir = tmp_path_factory.mktemp("observability")
    app = new_app(str(outdir))
    gpu_stack = cdk.Stack(app, STACKS[0], env=ENV)
    network = efa_network(gpu_stack, AZ)
    gpu_cluster = EksTrainingCluster(
        gpu_stack,
        "Cluster",
        EksTrainingClusterProps(
            vpc=network.net.vpc,
            node_subnet=network.net.compute_subnet,
            efa_security_group=network.efa.security_group,
            accelerated_groups=[
                AcceleratedNodeGroup(
                    name="p5",
                    instance_type="p5.48xlarge",
                    max_count=2,
                    placement_group=network.placement.placement_group,
                )
            ],
            cluster_name="llm-eks",
        ),
    )
    workspace = PrometheusWorkspace(gpu_stack, "Metrics", PrometheusWorkspaceProps(alias="llm-eks"))
    gpu = EksObservability(
        gpu_stack,
        "Observability",
        EksObservabilityProps(
            cluster=gpu_cluster.cluster,
            workspace=workspace,
            gpu_node_selector=GPU_NODE_SELECTOR,
            efa_exporter_port=EFA_EXPORTER_PORT,
            scrape_interval_seconds=60,
        ),
    )
    cpu_stack = cdk.Stack(app, STACKS[1], env=ENV)
    cpu_net = TrainingVpc(
        cpu_stack, "Vpc", TrainingVpcProps(availability_zone=AZ, second_availability_zone="us-east-1b")
    )
    cpu_cluster = EksTrainingCluster(
        cpu_stack,
        "Cluster",
        EksTrainingClusterProps(
            vpc=cpu_net.vpc, node_subnet=cpu_net.compute_subnet, system_nodes=SystemNodeGroup(count=1)
        ),
    )
    cpu_workspace = PrometheusWorkspace(
        cpu_stack, "Metrics", PrometheusWorkspaceProps(alias="ci-run", retain=False, logging=False)
    )
    cpu = EksObservability(
        cpu_stack,
        "Observability",
        # DCGM wanted (the default) but no GPU nodes: no chart, no job.
        EksObservabilityProps(
            cluster=cpu_cluster.cluster,
            workspace=cpu_workspace,
            subnet_ids=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
            security_group_ids=["sg-0123456789abcdef0"],
        ),
    )
    templates = synth_as_kiln(app, outdir, [gpu_stack, cpu_stack])
    return {
        "outdir": outdir,
        "gpu": gpu,
        "gpu_cluster": gpu_cluster,
        "workspace": workspace,
        "net": network.net,
        "cpu": cpu,
        "cpu_cluster": cpu_cluster,
        "cpu_workspace": cpu_workspace,
        "template": templates[STACKS[0]],
        "cpu_template": templates[STACKS[1]],
    }


def _cfn(construct) -> cdk.CfnElement:
    """Return the CloudFormation element below CONSTRUCT (an L2, a custom resource, or the element itself)."""
    while not isinstance(construct, cdk.CfnElement):
        construct = construct.node.default_child
    return construct


def _resource(template: Template, construct) -> dict:
    return template.to_json()["Resources"][logical_id(_cfn(construct))]


def _props(template: Template, construct) -> dict:
    return _resource(template, construct)["Properties"]


def _scraper(observed: dict, which: str = "gpu") -> dict:
    template = observed["template" if which == "gpu" else "cpu_template"]
    return _props(template, observed[which].scraper)


def _blob(observed: dict, which: str = "gpu") -> dict:
    blob = _scraper(observed, which)["ScrapeConfiguration"]["ConfigurationBlob"]
    assert isinstance(blob, str)  # kiln's configuration holds no deploy-time value
    return yaml.safe_load(blob)


def _jobs(config: dict) -> dict[str, dict]:
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_scraper_reads_the_cluster_from_its_vpc_and_writes_to_the_workspace(observed) -> None:
    gpu = observed["gpu"]
    assert gpu.scraper.node.id == "Scraper"
    scraper = _scraper(observed)
    cluster = observed["gpu_cluster"].cluster
    source = scraper["Source"]["EksConfiguration"]
    assert source["ClusterArn"] == get_att(cluster.node.default_child, "Arn")
    # Default: two AZs of the VPC's private subnets, in the cluster security group that every node joins.
    assert source["SubnetIds"] == [ref(s.node.default_child) for s in observed["net"].vpc.private_subnets]
    assert len(source["SubnetIds"]) >= 2
    assert source["SecurityGroupIds"] == [get_att(cluster.node.default_child, "ClusterSecurityGroupId")]
    assert scraper["Destination"] == {
        "AmpConfiguration": {"WorkspaceArn": get_att(observed["workspace"].workspace, "Arn")}
    }
    cpu_source = _scraper(observed, "cpu")["Source"]["EksConfiguration"]
    assert cpu_source["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    assert cpu_source["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    assert gpu.scraper_role_arn == gpu.scraper.attr_role_arn


def test_scrape_configuration_parses_with_the_interval_and_the_node_dcgm_and_efa_jobs(observed) -> None:
    config = _blob(observed)
    assert config == observed["gpu"].scrape_config
    assert config["global"] == {"scrape_interval": "60s"}
    jobs = _jobs(config)
    assert list(jobs) == ["node", "dcgm", "efa"]
    for name, addon in (("node", NODE_EXPORTER), ("dcgm", DCGM_EXPORTER)):
        (discovery,) = jobs[name]["kubernetes_sd_configs"]
        assert discovery == {"role": "pod", "namespaces": {"names": [MONITORING_NAMESPACE]}}
        keep = jobs[name]["relabel_configs"][0]
        assert keep["action"] == "keep"
        assert "__meta_kubernetes_pod_label_app_kubernetes_io_name" in keep["source_labels"]
        assert re.fullmatch(keep["regex"], f"{addon.chart};metrics;Running")
        assert not re.fullmatch(keep["regex"], f"{addon.chart};metrics;Pending")
    assert jobs["node"]["relabel_configs"][0]["regex"] != jobs["dcgm"]["relabel_configs"][0]["regex"]


def test_efa_job_scrapes_each_nodes_host_port_but_the_system_nodes(observed) -> None:
    efa = _jobs(_blob(observed))["efa"]
    assert efa["kubernetes_sd_configs"] == [{"role": "node"}]
    drop, address, _ = efa["relabel_configs"]
    assert drop == {
        "source_labels": ["__meta_kubernetes_node_label_kiln_io_node_group"],
        "regex": "system",
        "action": "drop",
    }
    assert address["source_labels"] == ["__meta_kubernetes_node_address_InternalIP"]
    assert address["target_label"] == "__address__"
    assert re.sub(r"\$1", "10.0.3.7", address["replacement"]) == "10.0.3.7:9342"
    assert EFA_EXPORTER_PORT == 9342


def test_cpu_cluster_scrapes_only_the_node_exporter_every_30_seconds(observed) -> None:
    config = _blob(observed, "cpu")
    assert config["global"] == {"scrape_interval": "30s"}
    assert list(_jobs(config)) == ["node"]


def test_collector_writes_through_its_own_role_pair_to_this_workspace_only(observed) -> None:
    gpu, template, workspace = observed["gpu"], observed["template"], observed["workspace"]
    source_id, target_id = (
        logical_id(gpu.source_role.node.default_child),
        logical_id(gpu.target_role.node.default_child),
    )
    assert _scraper(observed)["RoleConfiguration"] == {
        "SourceRoleArn": {"Fn::GetAtt": [source_id, "Arn"]},
        "TargetRoleArn": {"Fn::GetAtt": [target_id, "Arn"]},
    }
    # Any collector of this account in this region: its id is AMP's, and the collector names these roles.
    scrapers = "arn:aws:aps:us-east-1:111111111111:scraper/*"
    (trust,) = _props(template, gpu.source_role)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": SCRAPER_PRINCIPAL}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "111111111111"},
        "ArnLike": {"aws:SourceArn": scrapers},
    }
    (trust,) = _props(template, gpu.target_role)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": {"Fn::GetAtt": [source_id, "Arn"]}}
    assert trust["Condition"] == {"StringLike": {"sts:ExternalId": scrapers}}
    policies = {
        policy["Properties"]["Roles"][0]["Ref"]: policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if policy["Properties"]["Roles"][0]["Ref"] in (source_id, target_id)
    }
    assert policies[source_id] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Resource": {"Fn::GetAtt": [target_id, "Arn"]}}
    ]
    write, key = policies[target_id]
    assert write == {"Action": "aps:RemoteWrite", "Effect": "Allow", "Resource": get_att(workspace.workspace, "Arn")}
    assert key["Resource"] == get_att(workspace.key.node.default_child, "Arn")
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": "aps.us-east-1.amazonaws.com"}}
    # The collector starts only once its write grant is attached.
    policy_id = logical_id(_cfn(gpu.target_role.node.find_child("DefaultPolicy")))
    assert policy_id in _resource(template, gpu.scraper)["DependsOn"]


def test_charts_are_pinned_in_the_monitoring_namespace_and_dcgm_runs_on_gpu_nodes(observed) -> None:
    gpu, template = observed["gpu"], observed["template"]
    assert set(gpu.charts) == {"prometheus-node-exporter", "dcgm-exporter"}
    cluster_ref = ref(observed["gpu_cluster"].cluster.node.default_child)
    for addon in (NODE_EXPORTER, DCGM_EXPORTER):
        assert re.fullmatch(r"\d+\.\d+\.\d+", addon.version)
        chart = _props(template, gpu.charts[addon.chart])
        assert {k: chart[k] for k in ("Chart", "Repository", "Version", "Namespace", "Release")} == {
            "Chart": addon.chart,
            "Repository": addon.repository,
            "Version": addon.version,
            "Namespace": MONITORING_NAMESPACE,
            "Release": addon.release,
        }
        assert addon.repository.startswith("https://")  # the kubectl handler has no registry access
        assert chart["ClusterName"] == cluster_ref
        assert chart.get("CreateNamespace") in (None, False)
        # kiln's namespace object comes first.
        assert logical_id(_cfn(gpu.namespace)) in _resource(template, gpu.charts[addon.chart])["DependsOn"]
    assert (NODE_EXPORTER.version, DCGM_EXPORTER.version) == ("4.52.1", "4.8.3")
    dcgm = json.loads(_props(template, gpu.charts["dcgm-exporter"])["Values"])
    assert dcgm["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert dcgm["tolerations"] == [{"operator": "Exists"}]
    assert dcgm["serviceMonitor"] == {"enabled": False}
    node = json.loads(_props(template, gpu.charts["prometheus-node-exporter"])["Values"])
    assert node == {"tolerations": [{"operator": "Exists"}]}
    (namespace,) = json.loads(_props(template, gpu.namespace)["Manifest"])
    assert (namespace["kind"], namespace["metadata"]["name"]) == ("Namespace", MONITORING_NAMESPACE)


def test_dcgm_chart_is_absent_without_gpu_nodes(observed) -> None:
    cpu, template = observed["cpu"], observed["cpu_template"]
    assert set(cpu.charts) == {"prometheus-node-exporter"}
    charts = template.find_resources("Custom::AWSCDK-EKS-HelmChart")
    assert "dcgm-exporter" not in {c["Properties"]["Chart"] for c in charts.values()}
    assert "dcgm-exporter" in {
        c["Properties"]["Chart"] for c in observed["template"].find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    }


def test_kiln_makes_no_access_entry_for_the_collector(observed) -> None:
    # AMP creates the collector's access entry on an API-mode cluster; a second one for its role would collide.
    for template in (observed["template"], observed["cpu_template"]):
        for entry in template.find_resources("AWS::EKS::AccessEntry").values():
            assert "RoleArn" not in json.dumps(entry["Properties"]["PrincipalArn"])


def test_templates_lint_clean_and_pass_cdk_nag_and_checkov(observed) -> None:
    outdir: Path = observed["outdir"]
    paths = [outdir / f"{name}.template.json" for name in STACKS]
    for path in paths:
        assert lint_template(path, REGION) == ([], []), path.name
    report = nag_report(outdir)
    assert report.violations == []
    assert all(reason.strip() for _, reason in report.acknowledged)
    reviewed = {(skip.check, skip.reason) for skip in acknowledgements.CHECKOV_SKIPS}
    for path, result in run_checkov(paths).items():
        assert [f"{f.check_id} on {f.resource}" for f in result.failed] == [], path.name
        assert {(f.check_id, f.reason) for f in result.skipped} <= reviewed, path.name
        assert result.passed > 0


def test_scrape_config_has_only_the_chosen_jobs() -> None:
    def jobs(**kwargs) -> list[str]:
        chosen = {"node_exporter": False, "dcgm_exporter": False, "efa_exporter_port": None, **kwargs}
        return list(_jobs(scrape_config(interval_seconds=30, **chosen)))

    assert jobs(node_exporter=True) == ["node"]
    assert jobs(dcgm_exporter=True) == ["dcgm"]
    assert jobs(efa_exporter_port=9342) == ["efa"]
    assert jobs(node_exporter=True, dcgm_exporter=True, efa_exporter_port=9342) == ["node", "dcgm", "efa"]


@pytest.fixture(scope="module")
def plain_props() -> dict:
    """Props fields for validation: an imported cluster and workspace (nothing is synthesized)."""
    st = cdk.Stack(new_app(), "Props", env=ENV)
    return {
        "cluster": eks.Cluster.from_cluster_attributes(st, "Cluster", cluster_name="llm-eks"),
        "workspace": PrometheusWorkspace.from_workspace_attributes(
            st, "Workspace", workspace_arn=IMPORTED_ARN, prometheus_endpoint=IMPORTED_ENDPOINT
        ),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"scrape_interval_seconds": 5},
            "scrape_interval_seconds: got 5; allowed: an integer from 30 to 300",
        ),
        (
            {"scrape_interval_seconds": 301},
            "scrape_interval_seconds: got 301; allowed: an integer from 30 to 300",
        ),
        ({"scrape_interval_seconds": 30.5}, "scrape_interval_seconds: got 30.5; allowed"),
        ({"efa_exporter_port": 0}, "efa_exporter_port: got 0; allowed: a port from 1 to 65535"),
        ({"efa_exporter_port": 70000}, "efa_exporter_port: got 70000; allowed"),
        ({"gpu_node_selector": {}}, "gpu_node_selector: got {}; allowed: labels of the GPU nodes"),
        ({"subnet_ids": ["subnet-0123456789abcdef0"]}, "subnet_ids: got .*; allowed: at least two different subnets"),
        (
            {"subnet_ids": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef0"]},
            "subnet_ids: got .*; allowed: at least two different subnets",
        ),
        (
            {"node_exporter": False, "dcgm_exporter": True},
            "node_exporter/dcgm_exporter/efa_exporter_port: got .*; allowed: at least one exporter",
        ),
        ({"workspace": "ws-0123"}, "workspace: got 'str'; allowed: a PrometheusWorkspace"),
    ],
)
def test_invalid_props_are_refused(plain_props: dict, change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EksObservabilityProps(**{**plain_props, **change})


def _imported_cluster(st: cdk.Stack) -> eks.ICluster:
    """A cluster made elsewhere, known by name and kubectl handler alone (no VPC, no security group)."""
    return eks.Cluster.from_cluster_attributes(
        st,
        "Cluster",
        cluster_name="llm-eks",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            st, "Kubectl", service_token=KUBECTL_HANDLER
        ),
    )


def test_a_cluster_without_known_subnets_or_group_needs_them_passed(plain_props: dict) -> None:
    st = cdk.Stack(new_app(), "Imported", env=ENV)
    props = EksObservabilityProps(cluster=_imported_cluster(st), workspace=plain_props["workspace"])
    with pytest.raises(ValueError, match="subnet_ids: got \\[\\]; allowed: at least two subnets"):
        EksObservability(st, "Observability", props)


def test_a_cluster_without_a_known_security_group_needs_the_collector_s_passed(plain_props: dict) -> None:
    st = cdk.Stack(new_app(), "NoGroup", env=ENV)
    props = EksObservabilityProps(
        cluster=_imported_cluster(st),
        workspace=plain_props["workspace"],
        subnet_ids=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    )
    with pytest.raises(ValueError, match=r"^EksObservability\[NoGroup/Observability\]\.security_group_ids: got \[\]; "):
        EksObservability(st, "Observability", props)


def test_without_a_workspace_the_scraper_attributes_name_what_is_missing() -> None:
    st = cdk.Stack(new_app(), "Exporters", env=ENV)
    exporters = EksObservability(st, "Observability", EksObservabilityProps(cluster=_imported_cluster(st)))
    assert exporters.scraper is None
    for attribute in ("scraper_arn", "scraper_role_arn"):
        with pytest.raises(PropError, match=rf"^Exporters/Observability has no collector .*, so no {attribute}$"):
            getattr(exporters, attribute)


def test_the_observability_manifests_pass_kubernetes_own_schema(observed) -> None:
    from tests.support.eks_manifests import validate_manifests

    clusters = [(observed["template"], observed["gpu_cluster"]), (observed["cpu_template"], observed["cpu_cluster"])]
    assert "Namespace" in validate_manifests(clusters)
