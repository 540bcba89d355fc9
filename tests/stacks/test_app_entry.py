"""`cdk synth`/`cdk deploy` without `-c spec=`: ./cluster.yaml if there is one, else one line, never an example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT


def _app(cwd: Path, context: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CDK_OUTDIR": str(cwd / "cdk.out")}
    env.pop("CDK_CONTEXT_JSON", None)
    if context is not None:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _kiln_lines(stderr: str) -> list[str]:
    # jsii may print a Node.js banner of its own before kiln's line; kiln's lines are the rest.
    return [line for line in stderr.splitlines() if line and not line.startswith(("b'", "!!"))]


def test_without_a_spec_or_cluster_yaml_the_app_stops_with_one_line(tmp_path: Path) -> None:
    result = _app(tmp_path)
    assert result.returncode == 2
    lines = _kiln_lines(result.stderr)
    assert len(lines) == 1 and "-c spec=" in lines[0] and "cluster.yaml" in lines[0]
    assert not (tmp_path / "cdk.out").exists() or not list((tmp_path / "cdk.out").glob("*.template.json"))


def test_without_a_spec_the_app_uses_cluster_yaml_in_the_current_directory(tmp_path: Path) -> None:
    # An invalid ./cluster.yaml proves it was the file read, without paying for a synth.
    (tmp_path / "cluster.yaml").write_text("name: Not-Valid\n")
    result = _app(tmp_path)
    assert result.returncode == 2
    lines = _kiln_lines(result.stderr)
    assert lines == [
        "cluster.yaml: compute: is required",
        "cluster.yaml:1: name: must be a lowercase letter, then up to 30 lowercase letters, digits or '-' "
        "(got 'Not-Valid')",
    ]


def test_an_empty_spec_context_is_no_spec(tmp_path: Path) -> None:
    result = _app(tmp_path, {"spec": ""})
    assert result.returncode == 2 and "-c spec=" in _kiln_lines(result.stderr)[0]


def test_a_bad_lock_file_stops_the_app_with_one_line_before_synthesis(tmp_path: Path) -> None:
    spec = (ROOT / "examples" / "quickstart.yaml").read_text()
    (tmp_path / "cluster.yaml").write_text(spec + "software: {lock_file: cluster.lock.json}\n")
    (tmp_path / "cluster.lock.json").write_text('{"kiln_lock": 1, "about": "", "artifacts": [{"name": "pyxis"}]}')
    result = _app(tmp_path)
    assert result.returncode == 2
    [line] = _kiln_lines(result.stderr)
    assert line.startswith("cluster.yaml: software.lock_file: cluster.lock.json: artifacts[0]: must have exactly")
    assert not (tmp_path / "cdk.out").exists() or not list((tmp_path / "cdk.out").glob("*.template.json"))


def test_a_deeply_nested_lock_file_stops_the_app_with_one_line(tmp_path: Path) -> None:
    """The audit's 2.2 KB lock of 1,100 '[' raised RecursionError in the app; it is one line now."""
    spec = (ROOT / "examples" / "quickstart.yaml").read_text()
    (tmp_path / "cluster.yaml").write_text(spec + "software: {lock_file: cluster.lock.json}\n")
    (tmp_path / "cluster.lock.json").write_text("[" * 1100 + "]" * 1100)
    result = _app(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _kiln_lines(result.stderr) == [
        "cluster.yaml: software.lock_file: cluster.lock.json: nests deeper than 16 levels; not a kiln lock "
        "(format 1 nests 3)"
    ]


def test_a_deeply_nested_spec_stops_the_app_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("name: llm\ncompute: " + "[" * 20_000 + "\n")
    result = _app(tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = _kiln_lines(result.stderr)
    assert line.startswith("cluster.yaml:2:") and "nesting deeper than 100 levels" in line


def _unready_spec(tmp_path: Path) -> None:
    """Write cluster.yaml: the quickstart on an AMI of the user's own, with an EFA installer release AWS publishes no
    digest for and no lock, so its nodes would refuse that download."""
    spec = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec["compute"]["image"] = {"base": "own", "ami_id": "ami-0123456789abcdef0"}
    spec["compute"]["groups"][0]["min_count"] = spec["compute"]["groups"][0]["max_count"]
    spec["software"] = {"efa_installer": "1.47.0"}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(spec))


def test_synth_refuses_nodes_that_would_not_boot_in_validates_words(tmp_path: Path) -> None:
    _unready_spec(tmp_path)
    result = _app(tmp_path)
    assert result.returncode == 1
    refused, verdict = _kiln_lines(result.stderr)
    assert refused.startswith("cluster.yaml: not boot-ready: pcs nodes would refuse efa-installer 1.47.0 (install_efa;")
    assert verdict == (
        "cluster.yaml: not synthesized: its nodes would not boot (-c accept_unready=true synthesizes it anyway)"
    )
    assert not (tmp_path / "cdk.out").exists() or not list((tmp_path / "cdk.out").glob("*.template.json"))


def test_synth_of_unready_nodes_goes_on_only_when_asked_and_says_so(tmp_path: Path) -> None:
    _unready_spec(tmp_path)
    result = _app(tmp_path, {"accept_unready": "true"})
    assert result.returncode == 0, result.stderr
    lines = _kiln_lines(result.stderr)
    assert lines[-1] == "cluster.yaml: NOT boot-ready, synthesized as -c accept_unready=true asks"
    assert list((tmp_path / "cdk.out").glob("quickstart-compute.template.json"))
