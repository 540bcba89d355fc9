"""code-server on EKS (and HyperPod with EKS): one pod on the system nodes, the FSx volume where jobs mount it, its home
on that volume, 127.0.0.1 only, locked down. Read from the shared synthesized cluster (tests.support.eks_clusters).

That no security group of an EKS example opens code-server's port: tests/stacks/test_code_server_eks.py.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from kubernetes.utils import parse_quantity

from kiln.bootstrap.artifacts import npm_version
from kiln.catalog import instance_type
from kiln.catalog.code_server import (
    CODE_SERVER_DEPLOYMENT,
    CODE_SERVER_IMAGE_UID,
    CODE_SERVER_IMAGE_USER,
    CODE_SERVER_NAMESPACE,
    CODE_SERVER_PORT,
    config_path,
    home_directory,
    pod_home,
)
from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from kiln.catalog.limits import EKS_SYSTEM_NODE_TYPE
from kiln.constructs.eks_addons import KUBERNETES_RELEASES
from kiln.constructs.eks_code_server import CODE_SERVER_IMAGE, CodeServerPod, code_server_manifests
from kiln.constructs.eks_props import EksTrainingClusterProps
from kiln.jobs.pytorchjob import FSX_MOUNT
from kiln.stacks.compute_context import MOUNT_POINT
from tests.support.constructs import logical_id
from tests.support.eks_clusters import _base_props, _manifest, _props, _text

# Host namespaces, host ports and privileged mode: each would put the pod on the node's network or devices.
HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "hostUsers")


@pytest.fixture(scope="module")
def objects(eks) -> dict[str, dict]:
    """The code-server manifest of the shared training cluster, by kind."""
    found = _manifest(eks["template"], eks["cluster"].code_server)
    assert [o["kind"] for o in found] == ["Namespace", "PersistentVolume", "PersistentVolumeClaim", "Deployment"]
    return {o["kind"]: o for o in found}


def _resource_of(eks, manifest) -> dict:
    return eks["template"].to_json()["Resources"][logical_id(manifest.node.default_child)]


def _all_objects(eks) -> list[dict]:
    """Every Kubernetes object of every manifest resource of the training cluster's template."""
    resources = eks["template"].find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    return [o for resource in resources for o in json.loads(_text(resource["Properties"]["Manifest"]))]


def _pod(objects: dict[str, dict]) -> dict:
    return objects["Deployment"]["spec"]["template"]["spec"]


def _containers(objects: dict[str, dict]) -> dict[str, dict]:
    pod = _pod(objects)
    return {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}


def test_one_pod_of_the_pinned_release_in_kilns_namespace_never_two_at_once(objects) -> None:
    deployment = objects["Deployment"]
    assert objects["Namespace"]["metadata"]["name"] == CODE_SERVER_NAMESPACE == "kiln-dev"
    assert (deployment["metadata"]["namespace"], deployment["metadata"]["name"]) == ("kiln-dev", "code-server")
    assert deployment["metadata"]["name"] == CODE_SERVER_DEPLOYMENT
    assert deployment["spec"]["replicas"] == 1
    # Two pods over one home on a shared file system would corrupt each other's state: the old one goes first.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # One release for the nodes' npm install and the pod's image: the official image of that release, by tag.
    images = {c["image"] for c in _containers(objects).values()}
    assert images == {CODE_SERVER_IMAGE} == {f"docker.io/codercom/code-server:{npm_version('code-server')}"}
    # The note on digests at CODE_SERVER_IMAGE is about 4.139.1: a new release needs it looked at again.
    assert npm_version("code-server") == "4.139.1"


def test_code_server_listens_on_loopback_only_with_no_way_in_but_a_port_forward(eks, objects) -> None:
    pod = _pod(objects)
    server = _containers(objects)["code-server"]
    args = server["args"]
    assert args[args.index("--bind-addr") + 1] == f"127.0.0.1:{CODE_SERVER_PORT}"
    # Called directly: the image's entrypoint would run its setuid fixuid first.
    assert server["command"] == ["/usr/bin/dumb-init", "/usr/bin/code-server"]
    assert not set(HOST_FIELDS) & pod.keys()
    for container in _containers(objects).values():
        assert "ports" not in container, container["name"]
    # Nothing in the cluster exposes it: no Service or Ingress in any manifest kiln writes, and nothing in its
    # namespace but its claim and its Deployment.
    every = _all_objects(eks)
    assert not [o for o in every if o["kind"] in ("Service", "Ingress")]
    in_namespace = [o["kind"] for o in every if o["metadata"].get("namespace") == "kiln-dev"]
    assert sorted(in_namespace) == ["Deployment", "PersistentVolumeClaim"]
    # Its readiness is checked from inside the pod: kubelet's HTTP probes come from the node, which cannot reach it.
    assert server["readinessProbe"]["exec"]["command"][-1] == f"http://127.0.0.1:{CODE_SERVER_PORT}/healthz"


def test_the_pod_runs_as_the_images_user_without_privileges_a_token_or_a_writable_root(objects) -> None:
    pod = _pod(objects)
    uid = CODE_SERVER_IMAGE_UID
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # No fsGroup: kubelet would act on the shared file system itself (see kiln.constructs.eks_code_server).
    assert "fsGroup" not in pod["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    server = _containers(objects)["code-server"]
    assert server["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert dict(e.values() for e in server["env"]) == {"HOME": home_directory("coder"), "USER": "coder"}
    # The only writable paths: the file system (home included) and /tmp, an emptyDir of bounded size.
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts) == {FSX_MOUNT, "/home/coder", "/tmp"}
    assert volumes[mounts["/tmp"]["name"]] == {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}


def test_only_the_init_container_is_root_and_it_can_only_change_owners(objects) -> None:
    init = _containers(objects)["home"]
    assert init["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
    }
    # Baseline admits exactly that (CHOWN is among its allowed capabilities); no privileged pod enters the namespace.
    assert objects["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env == {"HOME_DIR": f"{FSX_MOUNT}/code-server/llm-eks", "OWNER": f"{CODE_SERVER_IMAGE_UID}:1000"}
    assert init["command"][:2] == ["sh", "-c"] and "chown -R" not in init["command"][2]


def test_the_fsx_volume_is_where_jobs_see_it_and_the_home_with_the_password_is_on_it(eks, objects) -> None:
    jobs = {o["kind"]: o for o in _manifest(eks["template"], eks["cluster"].lustre_volume)}
    volume, claim = objects["PersistentVolume"], objects["PersistentVolumeClaim"]
    # Its own claim in its own namespace, bound to the same file system as the jobs' claim, in the same class.
    assert volume["spec"]["csi"] == jobs["PersistentVolume"]["spec"]["csi"]
    assert volume["spec"]["storageClassName"] == jobs["StorageClass"]["metadata"]["name"]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert volume["metadata"]["name"] != jobs["PersistentVolume"]["metadata"]["name"]
    assert volume["spec"]["claimRef"] == {"namespace": "kiln-dev", "name": claim["metadata"]["name"]}
    assert claim["metadata"]["namespace"] == "kiln-dev" and claim["spec"]["volumeName"] == volume["metadata"]["name"]
    pod = _pod(objects)
    [fsx] = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert fsx["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    server = _containers(objects)["code-server"]
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    # Where PyTorchJobs mount it and where every backend's nodes mount it.
    assert mounts[FSX_MOUNT] == {"name": fsx["name"], "mountPath": FSX_MOUNT} and FSX_MOUNT == MOUNT_POINT
    # The home is the cluster's directory on it: settings, extensions and the password file survive the pod.
    home = mounts[home_directory(CODE_SERVER_IMAGE_USER)]
    assert home == {"name": fsx["name"], "mountPath": "/home/coder", "subPath": pod_home("llm-eks")}
    assert config_path(CODE_SERVER_IMAGE_USER).startswith(home["mountPath"] + "/")
    # The init container makes exactly that directory, on the same volume.
    init = _containers(objects)["home"]
    assert init["volumeMounts"] == [{"name": fsx["name"], "mountPath": FSX_MOUNT}]
    assert {e["name"]: e["value"] for e in init["env"]}["HOME_DIR"] == f"{FSX_MOUNT}/{home['subPath']}"
    # Applied after the Lustre volume's objects (its storage class).
    resource = _resource_of(eks, eks["cluster"].code_server)
    assert logical_id(eks["cluster"].lustre_volume.node.default_child) in resource["DependsOn"]


def test_it_runs_on_the_system_nodes_within_what_one_offers(eks, objects) -> None:
    pod = _pod(objects)
    assert pod["nodeSelector"] == {NODE_GROUP_LABEL: "system"}
    # No toleration: a tainted node (an accelerated one may be) never takes it.
    assert "tolerations" not in pod and "affinity" not in pod
    cluster = eks["cluster"]
    system = _props(eks["template"], cluster.system_node_group.node.default_child)
    assert system["Labels"] == pod["nodeSelector"]
    for group in cluster.node_groups.values():
        assert _props(eks["template"], group.node.default_child)["Labels"][NODE_GROUP_LABEL] != "system"
    node = instance_type(EKS_SYSTEM_NODE_TYPE)
    for container in _containers(objects).values():
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert set(requests) == set(limits) == {"cpu", "memory"}
        for name in requests:
            assert parse_quantity(requests[name]) <= parse_quantity(limits[name])
        # Half of the default system node at most: the cluster's services run there too.
        assert parse_quantity(limits["cpu"]) <= node.vcpus / 2
        assert parse_quantity(limits["memory"]) <= node.memory_mib * 2**20 / 2


@pytest.mark.parametrize("version", sorted(KUBERNETES_RELEASES))
def test_the_objects_pass_kubernetes_own_schema_of_each_version(objects, version: str) -> None:
    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_code_server_needs_the_lustre_volume_and_system_nodes(eks) -> None:
    base = _base_props(eks)
    for change in ({"lustre": None}, {"system_nodes": None, "cluster_autoscaler": False, "gang_scheduling": False}):
        with pytest.raises(ValueError, match="code_server: got 'code-server/llm-eks'; allowed: lustre and system_n"):
            EksTrainingClusterProps(**(base | change))
    assert eks["orchestrator"].code_server is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"home": "../other"}, "home: got '../other'"),
        ({"home": "code-server/../x"}, "home: got 'code-server/../x'"),
        ({"home": "/fsx/home"}, "home: got '/fsx/home'"),
        ({"home": "a//b"}, "home: got 'a//b'"),
        ({"home": "h", "mount_path": "fsx"}, "mount_path: got 'fsx'"),
        ({"home": "h", "mount_path": "/home/coder"}, "mount_path: got '/home/coder'"),
        ({"home": "h", "mount_path": "/fsx/"}, "mount_path: got '/fsx/'"),
    ],
)
def test_a_home_outside_the_file_system_or_a_mount_over_the_pods_own_paths_is_refused(
    kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CodeServerPod(**kwargs)


def test_the_manifests_follow_the_pods_props() -> None:
    pod = CodeServerPod(home="code-server/other", mount_path="/lustre")
    objects = code_server_manifests(
        pod, storage_class="sc", file_system_id="fs-0", dns_name="d", mount_name="m", storage_gib=2400
    )
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {m["mountPath"]: m.get("subPath") for m in server["volumeMounts"]} == {
        "/lustre": None,
        "/home/coder": "code-server/other",
        "/tmp": None,
    }
    [claim] = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2400Gi"
