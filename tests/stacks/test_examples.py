"""Every example synthesizes through app.py, lints clean and passes cdk-nag."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.spec import load_spec
from kiln.stacks.compute import has_compute
from kiln.stacks.synth import lint_template, nag_report
from tests.support.assemblies import run_app
from tests.support.paths import EXAMPLES, NODE_BIN, ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

STEMS = [path.stem for path in EXAMPLES]


@pytest.mark.parametrize("stem", STEMS)
def test_example_synthesizes_through_app_py(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    assert assembly.returncode == 0, assembly.stderr
    spec = load_spec(assembly.spec_path)
    parts = ["compute", "network", "storage"] if has_compute(spec) else ["network", "storage"]
    if spec.compute.image.bake:
        parts = sorted([*parts, "image"])
    assert sorted(assembly.templates()) == [f"{spec.name}-{part}" for part in parts]


@pytest.mark.parametrize("stem", STEMS)
def test_example_templates_pass_cfn_lint_without_errors_or_warnings(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    region = load_spec(assembly.spec_path).region or "us-east-1"
    for template in sorted(assembly.outdir.glob("*.template.json")):
        errors, warnings = lint_template(template, region)
        assert (errors, warnings) == ([], []), template.name


@pytest.mark.parametrize("stem", STEMS)
def test_example_has_no_open_cdk_nag_findings_and_every_acknowledgement_has_a_reason(
    example_assemblies, stem: str
) -> None:
    report = nag_report(example_assemblies[stem].outdir)
    assert report.violations == []
    assert all(reason.strip() for _, reason in report.acknowledged)


def test_stacks_are_env_agnostic_without_a_region(example_assemblies) -> None:
    manifest = json.loads((example_assemblies["quickstart"].outdir / "manifest.json").read_text())
    environments = {a["environment"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}
    assert environments == {"aws://unknown-account/unknown-region"}
    manifest = json.loads((example_assemblies["p5-pcs"].outdir / "manifest.json").read_text())
    environments = {a["environment"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}
    assert environments == {"aws://unknown-account/us-east-1"}


def test_resources_follow_the_spec(example_assemblies) -> None:
    pcs = example_assemblies["p5-pcs"].templates()
    network, storage = pcs["llm-pcs-network"]["Resources"], pcs["llm-pcs-storage"]["Resources"]
    assert [r["Properties"]["CidrBlock"] for r in network.values() if r["Type"] == "AWS::EC2::VPC"] == ["10.10.0.0/16"]
    # the p5 group runs in a capacity block, which places the nodes itself
    compute = pcs["llm-pcs-compute"]["Resources"]
    assert not [r for r in {**network, **compute}.values() if r["Type"] == "AWS::EC2::PlacementGroup"]
    (fs,) = [r for r in storage.values() if r["Type"] == "AWS::FSx::FileSystem"]
    assert fs["Properties"]["LustreConfiguration"]["EfaEnabled"] is True
    assert fs["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] == 500
    # The p5 group's placement group, in the compute stack beside its launch template.
    eks = example_assemblies["p5-eks"].templates()
    assert not [r for r in eks["llm-eks-network"]["Resources"].values() if r["Type"] == "AWS::EC2::PlacementGroup"]
    eks_compute = eks["llm-eks-compute"]["Resources"].values()
    assert [r["Properties"]["Strategy"] for r in eks_compute if r["Type"] == "AWS::EC2::PlacementGroup"] == ["cluster"]


def test_spec_tags_reach_every_resource_that_takes_tags(example_assemblies) -> None:
    template = example_assemblies["quickstart"].templates()["quickstart-network"]
    (vpc,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::VPC"]
    tags = {t["Key"]: t["Value"] for t in vpc["Properties"]["Tags"]}
    assert {"kiln:cluster": "quickstart", "team": "ml", "purpose": "quickstart"}.items() <= tags.items()


def test_bad_spec_stops_app_py_before_synth(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "name: bad\n"
        "compute: {backend: pcs, groups: [{name: gpu, instance_type: p5.48xlarge, min_count: 3, max_count: 1}]}\n"
    )
    process = run_app(spec, tmp_path / "out")
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 2
    assert stderr.strip() == f"{spec}:2: compute.groups[0].max_count: must be >= min_count (got 1 < 3)"
    assert not list((tmp_path / "out").glob("*.template.json"))


@pytest.mark.skipif(not (NODE_BIN / "cdk").exists(), reason="node_modules missing: run `make setup`")
def test_pinned_cdk_cli_synthesizes_an_example(tmp_path: Path) -> None:
    version = subprocess.run([str(NODE_BIN / "cdk"), "--version"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert version.stdout.startswith("2.1148.")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True, env=os.environ)
    assert node.stdout.startswith("v22."), "the CDK CLI must run on the pinned Node 22"
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [
            shutil.which("npx") or "npx",
            "cdk",
            "synth",
            "--all",
            "--quiet",
            "-c",
            "spec=examples/p5-parallelcluster.yaml",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        # cdk.json runs `python3 app.py`: as in an activated venv, this interpreter comes first.
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "CDK_DISABLE_VERSION_CHECK": "1",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*.template.json")) == [
        "llm-pcluster-compute.template.json",
        "llm-pcluster-network.template.json",
        "llm-pcluster-storage.template.json",
    ]


@pytest.mark.parametrize("stem", STEMS)
def test_every_example_is_boot_ready_as_shipped(stem: str) -> None:
    """No lock step: every download its nodes make has a published digest, a signature or a pinned commit."""
    from kiln.bootstrap.artifacts import bundle_artifacts
    from kiln.node_config.judge import load_and_judge
    from kiln.node_config.translate import config_from_spec

    spec, readiness = load_and_judge(f"examples/{stem}.yaml")
    assert readiness.ready, readiness.reasons()
    assert spec.lock_path is None, "an example needs no lock file"
    anchors = {artifact.name: artifact.anchor for artifact in bundle_artifacts(config_from_spec(spec))}
    assert all(anchors.values()), anchors
    if "enroot" in anchors:
        assert anchors["enroot"] == anchors["pyxis"] == "commit"


@pytest.mark.parametrize(
    ("stem", "cluster", "version"), [("p5-eks", "llm-eks", "1.36"), ("p5-hyperpod-eks", "llm-hp-eks", "1.34")]
)
def test_each_eks_example_runs_the_kubernetes_its_platform_supports(
    example_assemblies, stem: str, cluster: str, version: str
) -> None:
    """HyperPod on EKS runs the newest minor both AWS pages on its versions list (platforms.json), plain EKS the
    newest of EKS's."""
    template = example_assemblies[stem].templates()[f"{cluster}-compute"]
    [resource] = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    assert resource["Properties"]["Version"] == version


def test_the_hyperpod_eks_cluster_is_created_after_its_dependencies_are_installed(example_assemblies) -> None:
    """AWS requires HyperPod's dependency chart before the cluster (platforms.json): the SageMaker cluster depends on
    the wait for the install Job's success, which follows the revocation of its grant, which follows the wait for
    the Job to finish, which depends on the system nodes it runs on."""
    template = example_assemblies["p5-hyperpod-eks"].templates()["llm-hp-eks-compute"]
    resources = template["Resources"]
    [(name, cluster)] = [(k, r) for k, r in resources.items() if r["Type"] == "AWS::SageMaker::Cluster"]
    waits = [k for k, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"]
    [wait] = [k for k in waits if "HyperpodDependenciesReady" in k]
    assert wait in cluster["DependsOn"]
    [revoke] = [k for k in resources[wait]["DependsOn"] if "HyperpodDependenciesRevoke" in k]
    [finished] = [k for k in resources[revoke]["DependsOn"] if "HyperpodDependenciesFinished" in k]
    [nodegroup] = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroup in resources[finished]["DependsOn"]
