"""`cdk synth`/`cdk deploy` without `-c spec=`: ./cluster.yaml if there is one, else one line, never an example."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from kiln.stacks.app import NO_SPEC
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

CDK = ROOT / "node_modules" / ".bin" / "cdk"


def _app(cwd: Path, context: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CDK_OUTDIR": str(cwd / "cdk.out")}
    env.pop("CDK_CONTEXT_JSON", None)
    if context is not None:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _kiln_lines(stderr: str) -> list[str]:
    # kiln chose the Node.js jsii runs (kiln/host/node_runtime.py): no banner of jsii's comes before kiln's lines.
    return [line for line in stderr.splitlines() if line]


def test_without_a_spec_or_cluster_yaml_the_app_stops_with_one_line(tmp_path: Path) -> None:
    result = _app(tmp_path)
    assert result.returncode == 2
    lines = _kiln_lines(result.stderr)
    # One line that is true for synth, diff and deploy alike.
    assert lines == [
        "kiln: no spec given and no ./cluster.yaml here: add `-c spec=path/to/cluster.yaml` to the cdk command "
        "(start from examples/quickstart.yaml)"
    ]
    assert not (tmp_path / "cdk.out").exists() or not list((tmp_path / "cdk.out").glob("*.template.json"))


@pytest.mark.skipif(not CDK.exists(), reason="node_modules missing: run `make setup`")
@pytest.mark.parametrize("command", ["synth", "deploy"])
def test_the_real_cdk_cli_without_a_spec_is_told_what_holds_for_its_command(tmp_path: Path, command: str) -> None:
    env = {**os.environ, "PATH": f"{CDK.parent}{os.pathsep}{os.environ['PATH']}", "AWS_EC2_METADATA_DISABLED": "true"}
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    for name in ("CDK_CONTEXT_JSON", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    app = f"{sys.executable} {ROOT / 'app.py'}"
    result = subprocess.run(
        [str(CDK), command, "--no-notices", "--app", app, "-o", str(tmp_path / "cdk.out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    # The CLI prints the app's stderr line by line, then its own error.
    assert NO_SPEC in result.stderr.splitlines()
    # Never another command than the one that ran (synth is not told to deploy).
    assert "cdk deploy" not in result.stderr


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


# --- cdk.json's app: the project's venv, activated or not ----------------------------------------------------------

CDK_JSON_APP = json.loads((ROOT / "cdk.json").read_text())["app"]
NO_VENV_PATH = "/usr/bin:/bin"  # what a shell has before `source .venv/bin/activate`
WHICH_PYTHON = "import sys; print(sys.prefix)\n"  # a CDK app of one's own, as far as the launcher can tell


def _cdk_runs_the_app(cwd: Path, home: Path, **extra: str) -> subprocess.CompletedProcess:
    """Run cdk.json's "app" as the CDK CLI does: through a shell, in the directory of cdk.json."""
    env = {"PATH": NO_VENV_PATH, "HOME": str(home), **extra}
    return subprocess.run(  # noqa: S602 - the CDK CLI runs "app" through a shell; this is cdk.json's own string
        CDK_JSON_APP, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _project(directory: Path) -> Path:
    """DIRECTORY as a CDK app of one's own that copied the pattern: cdk.json and the launcher beside its app.py."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "cdk.json", directory / "cdk.json")
    shutil.copy(ROOT / "venv-python", directory / "venv-python")
    (directory / "app.py").write_text(WHICH_PYTHON)
    return directory


def _venv(directory: Path, *, with_cdk: bool) -> Path:
    """A venv at DIRECTORY; WITH_CDK, it sees this test run's packages (aws_cdk among them) through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    if with_cdk:
        purelib = subprocess.run(
            [str(directory / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "test-run.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return directory


def test_cdk_json_synthesizes_from_the_checkout_without_an_activated_venv(tmp_path: Path) -> None:
    assert CDK_JSON_APP == "sh ./venv-python app.py"
    context = json.dumps({"spec": "examples/quickstart.yaml"})
    result = _cdk_runs_the_app(ROOT, tmp_path, CDK_OUTDIR=str(tmp_path / "cdk.out"), CDK_CONTEXT_JSON=context)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "b'" not in result.stderr and "end-of-life" not in result.stderr
    assert (tmp_path / "cdk.out" / "quickstart-compute.template.json").exists()


def test_the_pattern_uses_the_projects_venv_over_an_activated_one(tmp_path: Path) -> None:
    project = _project(tmp_path / "app")
    venv = _venv(project / ".venv", with_cdk=True)
    other = _venv(tmp_path / "other", with_cdk=True)
    result = _cdk_runs_the_app(project, tmp_path, VIRTUAL_ENV=str(other))
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == venv


def test_the_pattern_uses_an_activated_venv_when_the_project_has_none(tmp_path: Path) -> None:
    project = _project(tmp_path / "app")
    other = _venv(tmp_path / "other", with_cdk=True)
    result = _cdk_runs_the_app(project, tmp_path, VIRTUAL_ENV=str(other))
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == other


def test_without_a_venv_with_the_cdk_the_pattern_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    project = _project(tmp_path / "app")
    _venv(project / ".venv", with_cdk=False)
    result = _cdk_runs_the_app(project, tmp_path)
    if result.returncode == 0:  # this machine's python3 has the CDK: the app runs on it
        assert result.stderr == "" and Path(result.stdout.strip()) != project / ".venv"
        return
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"venv-python: no Python with the AWS CDK to run app.py ({project}/.venv/bin/python, python3: no aws_cdk): "
        f"run `make setup` in {project} (kiln's checkout), or create {project}/.venv with your app's requirements"
    ]
