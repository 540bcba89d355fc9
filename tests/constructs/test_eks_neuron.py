"""EksTrainingCluster with Neuron nodes: the Neuron image, the device plugin and the scheduler extension, no NVIDIA."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from kiln.constructs import (
    CapacityOption,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.eks import EksTrainingCluster
from kiln.constructs.eks_addons import HELM_ADDONS, KUBERNETES_RELEASES
from kiln.constructs.eks_node_groups import AcceleratedNodeGroup
from kiln.constructs.eks_props import EksTrainingClusterProps
from kiln.constructs.neuron_addons import (
    NEURON_DEVICE_PLUGIN,
    NEURON_RESOURCES,
    NEURON_SCHEDULER,
    NEURON_SCHEDULER_EXTENSION,
    NEURON_SCHEDULER_EXTENSION_PORT,
    NEURON_SCHEDULER_NAME,
    scheduler_configuration,
)
from kiln.stacks.app import new_app
from kiln.stacks.synth import lint_template, nag_report
from tests.support.constructs import ENV, efa_network, logical_id, plain_bootstrap, synth_as_kiln
from tests.support.eks_clusters import _manifest, _props
from tests.support.eks_manifests import validate_manifests

REGION = "us-east-1"
AZ = "us-east-1a"
# A pin names one published image: the Neuron components' four-part tags, kube-scheduler's patch release.
NEURON_TAG = r"\d+\.\d+\.\d+\.\d+"


@pytest.fixture(scope="module")
def neuron(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Synthesize, once and with cdk-nag on, a cluster of Neuron groups and a HyperPod-shaped one with Neuron nodes."""
    outdir = tmp_path_factory.mktemp("eks-neuron")
    app = new_app(str(outdir))
    st = cdk.Stack(app, "Trn", env=ENV)
    network = efa_network(st, AZ)
    net, efa, placement = network.net, network.efa, network.placement
    cluster = EksTrainingCluster(
        st,
        "Cluster",
        EksTrainingClusterProps(
            vpc=net.vpc,
            node_subnet=net.compute_subnet,
            efa_security_group=efa.security_group,
            accelerated_groups=[
                AcceleratedNodeGroup(
                    name="trn1",
                    instance_type="trn1.32xlarge",
                    max_count=4,
                    root_volume_gib=512,
                    placement_group=placement.placement_group,
                    labels={"team": "ml"},
                ),
                AcceleratedNodeGroup(
                    name="inf2", instance_type="inf2.xlarge", max_count=2, capacity=CapacityOption(type="spot")
                ),
            ],
            bootstrap=plain_bootstrap(st, "eks-user-data.sh"),
            cluster_name="trn-eks",
        ),
    )
    hp_stack = cdk.Stack(app, "HyperPodTrn", env=ENV)
    hp_net = TrainingVpc(hp_stack, "Vpc", TrainingVpcProps(availability_zone=AZ, second_availability_zone="us-east-1b"))
    orchestrator = EksTrainingCluster(
        hp_stack,
        "Orchestrator",
        EksTrainingClusterProps(
            vpc=hp_net.vpc, node_subnet=hp_net.compute_subnet, system_nodes=None, external_accelerators=["neuron"]
        ),
    )
    templates = synth_as_kiln(app, outdir, [st, hp_stack])
    return {
        "outdir": outdir,
        "placement": placement,
        "cluster": cluster,
        "orchestrator": orchestrator,
        "template": templates["Trn"],
        "hp_template": templates["HyperPodTrn"],
    }


def _both(neuron: dict) -> list[tuple[Template, EksTrainingCluster]]:
    return [(neuron["template"], neuron["cluster"]), (neuron["hp_template"], neuron["orchestrator"])]


def _objects(neuron: dict, key: str) -> dict[tuple[str, str], dict]:
    """Return the Kubernetes objects of the training cluster's add-on KEY by (kind, name)."""
    objects = _manifest(neuron["template"], neuron["cluster"].addons[key])
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _unpruned(objects: list[dict]) -> list[dict]:
    """Return OBJECTS without the label CDK adds to every object to prune it later (it differs per cluster)."""
    for o in objects:
        labels = o["metadata"]["labels"]
        o["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith("aws.cdk.eks/prune-")}
    return objects


def _rules(objects: dict[tuple[str, str], dict]) -> list[dict]:
    return [rule for (kind, _), o in objects.items() if kind in ("ClusterRole", "Role") for rule in o["rules"]]


@pytest.mark.parametrize("name", ["trn1", "inf2"])
def test_neuron_groups_boot_the_eks_neuron_image_without_the_nvidia_label(neuron, name: str) -> None:
    group = _props(neuron["template"], neuron["cluster"].node_groups[name].node.default_child)
    assert group["AmiType"] == "AL2023_x86_64_NEURON"
    assert group["Labels"]["kiln.io/node-group"] == name
    # The NVIDIA plugin's chart selects nodes by this label: Neuron nodes must not carry it.
    assert "nvidia.com/gpu.present" not in group["Labels"]


def test_trn1_nodes_carry_every_efa_in_the_placement_group_with_imds_kept_to_the_node(neuron) -> None:
    template = neuron["cluster"].launch_templates["trn1"].launch_template
    data = _props(neuron["template"], template)["LaunchTemplateData"]
    assert data["InstanceType"] == "trn1.32xlarge"
    assert len(data["NetworkInterfaces"]) == 8
    assert data["Placement"]["GroupName"]["Fn::GetAtt"][0] == logical_id(
        neuron["placement"].placement_group.node.default_child
    )
    assert (data["MetadataOptions"]["HttpTokens"], data["MetadataOptions"]["HttpPutResponseHopLimit"]) == (
        "required",
        1,
    )


def test_neuron_clusters_install_no_nvidia_plugin_and_keep_efa(neuron) -> None:
    for template, cluster in _both(neuron):
        assert cluster.accelerator_kinds == {"neuron"}
        charts = {c["Properties"]["Chart"] for c in template.find_resources("Custom::AWSCDK-EKS-HelmChart").values()}
        assert "nvidia-device-plugin" not in charts
        assert {HELM_ADDONS["efa-device-plugin"].chart, HELM_ADDONS["fsx-csi-driver"].chart} <= charts
        assert {NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER} <= set(cluster.addons)
        assert cluster.neuron_scheduler_name == NEURON_SCHEDULER_NAME


def test_device_plugin_runs_the_pinned_image_on_every_neuron_type(neuron) -> None:
    objects = _objects(neuron, NEURON_DEVICE_PLUGIN)
    assert set(objects) == {
        ("ServiceAccount", NEURON_DEVICE_PLUGIN),
        ("ClusterRole", NEURON_DEVICE_PLUGIN),
        ("ClusterRoleBinding", NEURON_DEVICE_PLUGIN),
        ("DaemonSet", NEURON_DEVICE_PLUGIN),
    }
    pod = _pod(objects[("DaemonSet", NEURON_DEVICE_PLUGIN)])
    (container,) = pod["containers"]
    assert re.fullmatch(rf"public\.ecr\.aws/neuron/neuron-device-plugin:{NEURON_TAG}", container["image"])
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expression,) = term["matchExpressions"]
    assert expression["key"] == "node.kubernetes.io/instance-type"
    # Every Neuron type, by EC2 name and by HyperPod's; no GPU or CPU type.
    assert {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "inf2.xlarge", "ml.trn1.32xlarge"} <= set(
        expression["values"]
    )
    assert not {"p5.48xlarge", "g5.48xlarge", "m5.xlarge"} & set(expression["values"])
    # Like every device plugin kiln installs: on tainted nodes too.
    assert pod["tolerations"] == [{"operator": "Exists"}]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts and mounts["/opt/aws"]["readOnly"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    # The kubelet's credentials stay on the host: /etc/kubernetes is not mounted.
    assert not any(m.startswith("/etc/kubernetes") for m in mounts)


def test_second_scheduler_consults_the_extension_for_neuron_resources(neuron) -> None:
    objects = _objects(neuron, NEURON_SCHEDULER)
    config_map = objects[("ConfigMap", f"{NEURON_SCHEDULER_NAME}-config")]
    (config_text,) = config_map["data"].values()
    config = json.loads(config_text)
    assert config == scheduler_configuration()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": NEURON_SCHEDULER_NAME}]
    (extender,) = config["extenders"]
    service = objects[("Service", NEURON_SCHEDULER_EXTENSION)]
    (port,) = service["spec"]["ports"]
    namespace = service["metadata"]["namespace"]
    assert extender["urlPrefix"] == (
        f"http://{NEURON_SCHEDULER_EXTENSION}.{namespace}.svc.cluster.local:{port['port']}"
    )
    assert port["port"] == NEURON_SCHEDULER_EXTENSION_PORT == 12345
    assert (extender["filterVerb"], extender["bindVerb"], extender["ignorable"]) == ("filter", "bind", False)
    assert "prioritizeVerb" not in extender
    assert [r["name"] for r in extender["managedResources"]] == list(NEURON_RESOURCES)
    assert set(NEURON_RESOURCES) == {"aws.amazon.com/neuron", "aws.amazon.com/neuroncore"}
    assert config["leaderElection"]["resourceName"] == NEURON_SCHEDULER_NAME
    # The extension's pods are the ones the Service selects, listening on the port it forwards to.
    extension = objects[("Deployment", NEURON_SCHEDULER_EXTENSION)]
    assert service["spec"]["selector"] == extension["spec"]["template"]["metadata"]["labels"]
    (container,) = _pod(extension)["containers"]
    assert container["ports"] == [{"name": port["targetPort"], "containerPort": port["port"]}]
    assert {"name": "PORT", "value": str(port["port"])} in container["env"]
    assert re.fullmatch(rf"public\.ecr\.aws/neuron/neuron-scheduler:{NEURON_TAG}", container["image"])
    assert extension["spec"]["strategy"] == {"type": "Recreate"}


def test_second_scheduler_runs_kube_scheduler_of_the_clusters_kubernetes_version(neuron) -> None:
    version = _props(neuron["template"], neuron["cluster"].cluster.node.default_child)["Version"]
    scheduler = _objects(neuron, NEURON_SCHEDULER)[("Deployment", NEURON_SCHEDULER_NAME)]
    pod = _pod(scheduler)
    (container,) = pod["containers"]
    assert container["image"] == KUBERNETES_RELEASES[version].kube_scheduler_image
    assert re.fullmatch(rf"registry\.k8s\.io/kube-scheduler:v{re.escape(version)}\.\d+", container["image"])
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == f"{NEURON_SCHEDULER_NAME}-config"
    (mount,) = container["volumeMounts"]
    assert f"--config={mount['mountPath']}/config.yaml" in container["command"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_neuron_components_hold_only_the_kubernetes_rights_they_use(neuron) -> None:
    plugin, scheduler = _objects(neuron, NEURON_DEVICE_PLUGIN), _objects(neuron, NEURON_SCHEDULER)
    rules = _rules(plugin) + _rules(scheduler)
    # No wildcards, no secrets, no ConfigMaps (AWS's chart lets its scheduler read every one), no RBAC writes.
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert not {"secrets", "configmaps", "roles", "clusterroles", "rolebindings"} & set(rule["resources"]), rule
    bindings = {
        name: (o["roleRef"]["kind"], o["roleRef"]["name"], [s["name"] for s in o["subjects"]])
        for (kind, name), o in {**plugin, **scheduler}.items()
        if kind.endswith("Binding")
    }
    assert "cluster-admin" not in {role for _, role, _ in bindings.values()}
    # The second scheduler: Kubernetes' scheduler roles, the authentication ConfigMap's reader, and its own lease.
    assert sorted(
        (kind, role) for kind, role, subjects in bindings.values() if subjects == [NEURON_SCHEDULER_NAME]
    ) == [
        ("ClusterRole", "system:kube-scheduler"),
        ("ClusterRole", "system:volume-scheduler"),
        ("Role", "extension-apiserver-authentication-reader"),
        ("Role", f"{NEURON_SCHEDULER_NAME}-lease"),
    ]
    (lease,) = scheduler[("Role", f"{NEURON_SCHEDULER_NAME}-lease")]["rules"]
    assert lease == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "update"],
        "resourceNames": [NEURON_SCHEDULER_NAME],
    }
    # Each account is bound only to what its own workload runs as.
    accounts = {
        _pod(o)["serviceAccountName"]
        for (kind, _), o in {**plugin, **scheduler}.items()
        if "spec" in o and "template" in o["spec"]
    }
    assert accounts == {NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER_EXTENSION, NEURON_SCHEDULER_NAME}
    assert {s for _, _, subjects in bindings.values() for s in subjects} == accounts


def test_neuron_pods_get_no_aws_identity(neuron) -> None:
    for template, cluster in _both(neuron):
        # The VPC CNI's association, and the autoscaler's with node groups: no Neuron service account gets a role.
        accounts = {
            a["Properties"]["ServiceAccount"]
            for a in template.find_resources("AWS::EKS::PodIdentityAssociation").values()
        }
        assert accounts == {"aws-node"} | ({"cluster-autoscaler"} if cluster.node_groups else set())
        # Off the host network, behind IMDS hop limit 1, the pods cannot reach the node role either.
        for key in (NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER):
            for o in _manifest(template, cluster.addons[key]):
                if o["kind"] in ("DaemonSet", "Deployment"):
                    assert not _pod(o).get("hostNetwork"), o["metadata"]["name"]


def test_hyperpod_orchestrator_runs_the_same_neuron_components_for_joining_nodes(neuron) -> None:
    template, orchestrator = neuron["hp_template"], neuron["orchestrator"]
    template.resource_count_is("AWS::EKS::Nodegroup", 0)
    for key in (NEURON_DEVICE_PLUGIN, NEURON_SCHEDULER):
        assert _unpruned(_manifest(template, orchestrator.addons[key])) == _unpruned(
            _manifest(neuron["template"], neuron["cluster"].addons[key])
        )


def test_templates_lint_clean_and_cdk_nag_has_no_open_findings(neuron) -> None:
    outdir: Path = neuron["outdir"]
    for name in ("Trn", "HyperPodTrn"):
        assert lint_template(outdir / f"{name}.template.json", REGION) == ([], []), name
    report = nag_report(outdir)
    assert report.violations == []
    assert all(reason.strip() for _, reason in report.acknowledged)


@pytest.mark.parametrize(
    ("instance_type", "ami_type"),
    [
        ("trn1.32xlarge", "AL2023_x86_64_NEURON"),
        ("trn1n.32xlarge", "AL2023_x86_64_NEURON"),
        ("trn2.48xlarge", "AL2023_x86_64_NEURON"),
        ("inf2.48xlarge", "AL2023_x86_64_NEURON"),
        ("p5.48xlarge", "AL2023_x86_64_NVIDIA"),
        ("g5g.16xlarge", "AL2023_ARM_64_NVIDIA"),
    ],
)
def test_the_image_follows_the_instance_types_accelerators(instance_type: str, ami_type: str) -> None:
    assert AcceleratedNodeGroup(name="g", instance_type=instance_type).effective_ami_type == ami_type


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"instance_type": "trn1.32xlarge", "ami_type": "AL2023_x86_64_NVIDIA"},
            "ami_type: got 'AL2023_x86_64_NVIDIA'; allowed: an image for trn1.32xlarge's Neuron devices: "
            "AL2023_x86_64_NEURON$",
        ),
        (
            {"instance_type": "p5.48xlarge", "ami_type": "AL2023_x86_64_NEURON"},
            "ami_type: got 'AL2023_x86_64_NEURON'; allowed: an image for p5.48xlarge's GPUs: AL2023_x86_64_NVIDIA$",
        ),
        (
            {"instance_type": "c5n.18xlarge"},
            "instance_type: got 'c5n.18xlarge'; allowed: a type with NVIDIA GPUs or AWS Neuron devices",
        ),
    ],
)
def test_an_image_for_other_accelerators_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AcceleratedNodeGroup(name="g", **kwargs)


def test_the_accelerator_literal_names_exactly_the_catalog_kinds() -> None:
    from typing import get_args

    from kiln.catalog.facts import ACCELERATOR_KINDS
    from kiln.constructs.eks_addons import AcceleratorKind

    assert get_args(AcceleratorKind) == ACCELERATOR_KINDS


def test_the_neuron_manifests_pass_kubernetes_own_schema(neuron) -> None:
    kinds = validate_manifests(_both(neuron))
    assert {"DaemonSet", "Deployment", "ConfigMap", "ClusterRole"} <= kinds, kinds
