"""The boot budget of a spec: a PCS group whose setup cannot fit PCS's fixed deadline is refused, with a bake as the
remedy; `kiln validate` shows every node's estimate."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from kiln.catalog.platforms import service_fact
from kiln.cli.main import main
from kiln.node_config.budget import boot_budget, parallelcluster_timeouts
from kiln.node_config.translate import config_from_spec
from kiln.spec import load_spec
from tests.support.pcluster_schema import concrete, load_with_official_schema
from tests.support.specs import MINIMAL_SPEC

# The user's own PCS AMI (base: own): kiln installs the NVIDIA driver and EFA on it at every boot.
OWN_AMI = {"ami_id": "ami-0123456789abcdef0", "base": "own"}


def _spec(tmp_path: Path, *, min_count: int = 0, bake: bool = False) -> Path:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["compute"]["groups"][0]["min_count"] = min_count
    spec["compute"]["image"] = {**OWN_AMI, "bake": bake}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _budget(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The spec's budget lines and refusals (its margin warnings: tests/bootstrap/test_budget_margin.py)."""
    spec = load_spec(path)
    lines, refusals, _ = boot_budget(spec, config_from_spec(spec))
    return lines, refusals


def test_a_group_scaling_from_zero_past_pcs_deadline_is_refused_with_a_bake_as_the_remedy(tmp_path: Path) -> None:
    lines, refusals = _budget(_spec(tmp_path))
    [refusal] = refusals
    assert refusal.startswith(
        "not boot-ready: gpu nodes (p5.48xlarge) scale from zero, and their setup at boot takes ~"
    )
    assert "past PCS's ResumeTimeout of 30 min: bake the install steps into the image (compute.image.bake: true)" in (
        refusal
    )
    [gpu] = [line for line in lines if line.startswith("gpu ")]
    assert "install_nvidia_driver 7, install_efa 6" in gpu and gpu.endswith("; PCS's ResumeTimeout is 30 min")


@pytest.mark.parametrize(("min_count", "bake"), [(1, False), (0, True)], ids=["static nodes", "baked"])
def test_static_nodes_and_a_baked_image_are_not_refused(tmp_path: Path, min_count: int, bake: bool) -> None:
    lines, refusals = _budget(_spec(tmp_path, min_count=min_count, bake=bake))
    assert refusals == ()
    assert any(line.startswith("gpu (p5.48xlarge): setup at boot ~") for line in lines)


def test_validate_refuses_the_group_and_accepts_it_only_when_asked(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path)
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    refused = [line for line in captured.err.splitlines() if "scale from zero" in line]
    assert len(refused) == 1 and refused[0].startswith(f"{path}: not boot-ready: gpu nodes")
    assert "1 kind of node past their platform's deadline" in captured.out
    assert main(["validate", "--accept-unready", str(path)]) == 0
    out = capsys.readouterr().out
    assert "accepted by --accept-unready" in out and "  gpu (p5.48xlarge): setup at boot ~" in out


def test_the_example_sets_both_bootstrap_timeouts_from_kilns_estimate(example_assemblies) -> None:
    """ParallelCluster's Slurm ResumeTimeout follows ComputeNodeBootstrapTimeout (platforms.json): kiln sets it, and
    the head node's, from its estimate of the nodes' setup, never below ParallelCluster's default."""
    spec = load_spec(example_assemblies["p5-parallelcluster"].spec_path)
    expected = parallelcluster_timeouts(spec, config_from_spec(spec))
    default = service_fact("parallelcluster", "compute_node_bootstrap_timeout").value["default_seconds"]
    assert expected == {"HeadNodeBootstrapTimeout": default, "ComputeNodeBootstrapTimeout": default}
    template = example_assemblies["p5-parallelcluster"].templates()["llm-pcluster-compute"]
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    config = resource["Properties"]["ClusterConfiguration"]
    assert config["DevSettings"] == {"Timeouts": expected}
    loaded = load_with_official_schema(concrete(config), "llm-pcluster")
    assert loaded.dev_settings.timeouts.compute_node_bootstrap_timeout == default


@pytest.mark.parametrize(("stem", "stack"), [("p5-eks", "llm-eks-compute"), ("trn1-eks", "trn-eks-compute")])
def test_eks_nodes_get_the_budgets_time_to_become_ready(example_assemblies, stem, stack) -> None:
    """The autoscaler waits for a new node as long as kiln's estimate of its setup (with headroom, at least its own
    15 minutes), and Kueue for a job's pods that long plus their image pull."""
    from kiln.constructs.eks_scheduling import CLUSTER_AUTOSCALER_FACTS, IMAGE_PULL_SECONDS
    from kiln.node_config.budget import eks_node_provision_seconds

    spec = load_spec(example_assemblies[stem].spec_path)
    default = CLUSTER_AUTOSCALER_FACTS["default_provision_seconds"]
    seconds = eks_node_provision_seconds(spec, config_from_spec(spec), default)
    assert seconds >= default and seconds % 300 == 0
    resources = example_assemblies[stem].templates()[stack]["Resources"].values()
    [chart] = [
        r
        for r in resources
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    assert json.loads(_joined(chart["Properties"]["Values"]))["extraArgs"]["max-node-provision-time"] == f"{seconds}s"
    manifests = [
        json.loads(_joined(r["Properties"]["Manifest"]))
        for r in resources
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ]
    [install] = [o for objects in manifests for o in objects if o["kind"] == "Job" and "kueue" in o["metadata"]["name"]]
    # The helm step: `sh -c RUN_CHECKED helm PATH SHA256 upgrade --install ... --set KEY=VALUE ...` (eks_install).
    [step] = [c for c in install["spec"]["template"]["spec"]["initContainers"] if c["name"] == "install"]
    args = step["command"]
    [config] = [json.loads(a.split("=", 1)[1]) for a in args if a.startswith("managerConfig.")]
    assert json.loads(config)["waitForPodsReady"]["timeout"] == f"{seconds + IMAGE_PULL_SECONDS}s"


def _joined(value) -> str:
    """Return a template string with its tokens (Fn::Join parts that are not strings) dropped."""
    if isinstance(value, str):
        return value
    _, parts = value["Fn::Join"]
    return "".join(part for part in parts if isinstance(part, str))
