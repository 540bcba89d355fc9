"""kiln-launch on a node without torch that names a training image: the same command line in that container."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.launcher import container
from kiln.launcher.check import INFORMATIONAL, screen
from kiln.launcher.errors import LaunchError
from kiln.stacks.compute_context import MOUNT_POINT
from tests.support.launcher import clean_env
from tests.support.paths import ROOT

IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"
SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "trn1-dy-[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
}

# Stands in for enroot: records each call, keeps its "containers" in FAKE_ENROOT_STATE, and for `start` runs the
# command as enroot would (--rc script, environment cleared to the image's PATH plus --env) in a view of the container
# where each --mount target is a link to its source: PYTHONPATH and the working directory are read through that view.
FAKE_ENROOT = r"""#!{python}
import json, os, subprocess, sys
state = os.environ["FAKE_ENROOT_STATE"]
with open(os.path.join(state, "calls.jsonl"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
verb, args = sys.argv[1], sys.argv[2:]
if verb == "import":
    if os.environ.get("FAKE_ENROOT_IMPORT_FAILS"):
        print("[ERROR] URL https://public.ecr.aws/token/ returned error code: 403 Forbidden", file=sys.stderr)
        sys.exit(1)
    assert args[0] == "--output" and not os.path.exists(args[1]), args
    assert args[2].startswith("docker://"), args
    with open(args[1], "wb") as out:
        out.write(b"hsqs")
elif verb == "list":
    print("\n".join(sorted(n for n in os.listdir(state) if n.startswith("kiln-"))))
elif verb == "create":
    assert args[0] == "--name" and open(args[2], "rb").read() == b"hsqs", args
    os.mkdir(os.path.join(state, args[1]))
elif verb == "remove":
    os.rmdir(os.path.join(state, args[-1]))
elif verb == "start":
    rc, mounts, env = None, [], {{"PATH": os.environ["FAKE_IMAGE_PATH"]}}
    while args[0].startswith("--"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--rc":
            rc = value
        elif flag == "--mount":
            mounts.append(value.split(":"))
        elif flag == "--env":
            name, sep, given = value.partition("=")
            if sep:
                env[name] = given
            elif name in os.environ:
                env[name] = os.environ[name]
    name, workdir, command = args[0], args[1], args[2:]
    assert os.path.isdir(os.path.join(state, name)), name
    view = os.path.join(state, "view-" + name)
    for source, target, _type, options in mounts:
        link = view + target
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.lexists(link):
            os.symlink(source, link)
    env["PYTHONPATH"] = view + env.get("PYTHONPATH", "")
    sys.exit(subprocess.run(["sh", rc, view + workdir, *command], env=env).returncode)
else:
    sys.exit(f"fake enroot: unexpected {{sys.argv}}")
"""


def node_python(directory: Path, *, site: bool) -> Path:
    """Write DIRECTORY/python3: this interpreter, with its site-packages (torch) only when SITE."""
    directory.mkdir(parents=True, exist_ok=True)
    python = directory / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {"" if site else "-S "}"$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture
def trainium_node(tmp_path: Path) -> dict[str, str]:
    """A trn1.32xlarge Slurm node: the bootstrap's /etc/kiln under KILN_ROOT (launcher.env naming the image), the
    node venv's python3 without torch running a copy of kiln, a fake enroot on PATH, and the image's python3 (this
    interpreter with torch). Return the environment srun gives kiln-launch."""
    root = tmp_path / "root"
    etc = root / "etc/kiln"
    etc.mkdir(parents=True)
    (etc / "instance-type").write_text("trn1.32xlarge\n")
    (etc / "launcher.env").write_text(f"KILN_CLUSTER_NAME=trn\nKILN_TRAINING_IMAGE={IMAGE}\nKILN_ROOT={root}\n")
    (etc / "container-cache").write_text(f"{tmp_path / 'scratch'}\n")
    venv = tmp_path / "venv"
    shutil.copytree(ROOT / "kiln", venv / "site/kiln", ignore=shutil.ignore_patterns("__pycache__"))
    host_bin = venv / "bin"
    node_python(host_bin, site=False)
    enroot = host_bin / "enroot"
    enroot.write_text(FAKE_ENROOT.format(python=sys.executable))
    enroot.chmod(0o755)
    state = tmp_path / "enroot"
    state.mkdir()
    node_python(tmp_path / "image/bin", site=True)
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "train.py").write_text("import torch\n")
    return clean_env(
        PATH=f"{host_bin}:/usr/bin:/bin",
        PYTHONPATH=str(venv / "site"),
        HOME=str(tmp_path / "home"),
        KILN_ROOT=str(root),
        KILN_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        FAKE_ENROOT_STATE=str(state),
        FAKE_IMAGE_PATH=f"{tmp_path / 'image/bin'}:/usr/bin:/bin",
        NEURON_RT_LOG_LEVEL="WARNING",
        **SLURM,
    )


def launch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    cwd = Path(env["FAKE_ENROOT_STATE"]).parent / "job"
    return subprocess.run(
        ["python3", "-m", "kiln.launcher", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def enroot_calls(env: dict[str, str]) -> list[list[str]]:
    calls = Path(env["FAKE_ENROOT_STATE"]) / "calls.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def documents(text: str) -> list[dict]:
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, at = decoder.raw_decode(text, at)
        found.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return found


def test_dry_run_on_a_trainium_slurm_node_plans_inside_the_training_container_once_imported(trainium_node, tmp_path):
    result = launch(trainium_node, "--dry-run", "train.py", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    outer, inner = documents(result.stdout)
    plan = outer["container"]
    assert plan["image"] == IMAGE
    assert plan["mounts"][0] == {"source": str(tmp_path / "root/etc/kiln"), "target": "/etc/kiln", "read_only": True}
    assert plan["mounts"][1] == {
        "source": str(tmp_path / "venv/site/kiln"),
        "target": "/opt/kiln-launcher/kiln",
        "read_only": True,
    }
    assert {"source": str(tmp_path / "job"), "target": str(tmp_path / "job"), "read_only": False} in plan["mounts"]
    # The launcher inside: Slurm's variables came through, one worker per NeuronCore of a trn1.32xlarge.
    assert inner["environment"]["scheduler"] == "slurm"
    assert inner["environment"]["nnodes"] == "2"
    assert inner["environment"]["nproc_per_node"] == 32
    assert inner["instance_type"]["name"] == "trn1.32xlarge"
    assert inner["torchrun_args"][-3:] == ["train.py", "--epochs", "3"]
    verbs = [call[0] for call in enroot_calls(trainium_node)]
    assert verbs == ["import", "list", "create", "start", "start"]
    imported = enroot_calls(trainium_node)[0]
    assert imported[-1] == f"docker://public.ecr.aws#{IMAGE.split('/', 1)[1]}"
    probe, start = enroot_calls(trainium_node)[3:]
    assert probe[-3:] == ["python3", "-c", "import torch"]
    assert start[-7:] == ["python3", "-m", "kiln.launcher", "--dry-run", "train.py", "--epochs", "3"]
    marker = start.index("KILN_IN_CONTAINER=1")
    assert start[marker - 1] == "--env"
    for name in ("SLURM_JOB_ID", "SLURM_NODEID", "NEURON_RT_LOG_LEVEL", "KILN_ROOT"):
        assert name in start
    assert "PATH" not in start and "HOME" not in start
    # The code the launcher inside imported (PYTHONPATH, ahead of the image's own packages) is the node venv's copy.
    view = Path(trainium_node["FAKE_ENROOT_STATE"]) / f"view-{plan['name']}"
    assert (view / "opt/kiln-launcher/kiln").resolve() == tmp_path / "venv/site/kiln"
    # The next job step on this node reuses the image and its container.
    again = launch(trainium_node, "--dry-run", "train.py")
    assert again.returncode == 0, again.stderr
    assert [call[0] for call in enroot_calls(trainium_node)[5:]] == ["list", "start"]


def test_no_enroot_is_one_line(trainium_node, tmp_path):
    (tmp_path / "venv/bin/enroot").unlink()
    result = launch(trainium_node, "train.py")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "enroot is not on PATH to run the training container" in result.stderr
    assert IMAGE in result.stderr


def test_a_failed_import_names_the_image_and_the_log(trainium_node, tmp_path):
    result = launch({**trainium_node, "FAKE_ENROOT_IMPORT_FAILS": "1"}, "train.py")
    assert result.returncode == 1
    error = result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert error.startswith(f"kiln-launch: error: enroot could not import the training container {IMAGE} (exit 1")
    assert "403 Forbidden" in error
    log = tmp_path / "scratch" / str(os.getuid()) / f"{container.container_name(IMAGE, os.getuid())}.import.log"
    assert error.endswith(f"its log: {log}")
    assert not list(log.parent.glob("*.sqsh"))


def test_an_image_without_torch_is_one_line(trainium_node, tmp_path):
    node_python(tmp_path / "image/bin", site=False)
    result = launch(trainium_node, "train.py")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"kiln-launch: error: the training container {IMAGE} has no python3 that imports torch")
    assert "No module named 'torch'" in error
    # Not left for the next step to trust.
    assert [call[0] for call in enroot_calls(trainium_node)][-1] == "remove"


def test_a_cache_directory_of_another_user_is_refused(trainium_node, tmp_path):
    mine = tmp_path / "scratch" / str(os.getuid())
    mine.mkdir(parents=True)
    mine.chmod(0o777)
    result = launch(trainium_node, "train.py")
    assert result.returncode == 1
    assert f"the container cache {mine} is not this user's own" in result.stderr
    assert enroot_calls(trainium_node) == []


def plan_for(environ: dict[str, str], **changes) -> container.ContainerPlan | None:
    settings = {"torch_here": False, "cwd": "/fsx/jobs/llm", "uid": 2001} | changes
    return container.plan(["train.py"], environ, **settings)


def test_no_container_inside_one_with_torch_here_or_without_an_image(tmp_path):
    named = {"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}
    assert plan_for(named) is not None
    assert plan_for({**named, "KILN_IN_CONTAINER": "1"}) is None
    assert plan_for(named, torch_here=True) is None
    assert plan_for({"KILN_ROOT": str(tmp_path)}) is None


def test_the_image_comes_from_launcher_env_when_the_environment_has_none(tmp_path):
    (tmp_path / "etc/kiln").mkdir(parents=True)
    (tmp_path / "etc/kiln/launcher.env").write_text(f"KILN_VENV=/opt/kiln/venv\nKILN_TRAINING_IMAGE={IMAGE}\n")
    assert plan_for({"KILN_ROOT": str(tmp_path)}).image == IMAGE
    own = "registry.example.com:5000/me/train:v1"
    got = plan_for({"KILN_ROOT": str(tmp_path), "KILN_TRAINING_IMAGE": own})
    assert (got.image, got.uri) == (own, "docker://registry.example.com:5000#me/train:v1")


def test_names_differ_per_user_and_per_image(tmp_path):
    environ = {"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}
    names = {
        plan_for(environ, uid=2001).name,
        plan_for(environ, uid=2002).name,
        plan_for({**environ, "KILN_TRAINING_IMAGE": IMAGE.replace("sdk2.29.1", "sdk2.29.0")}, uid=2001).name,
    }
    assert len(names) == 3
    assert all(name.startswith(("kiln-2001-", "kiln-2002-")) for name in names)


def test_environment_passes_the_jobs_variables_and_marks_the_container(tmp_path):
    environ = {
        "KILN_TRAINING_IMAGE": IMAGE,
        "KILN_ROOT": str(tmp_path),
        "SLURM_JOB_ID": "7",
        # What the launcher inside names this node's compile cache by (kiln.launcher.compile_cache).
        "SLURM_JOB_NAME": "llm",
        "SLURM_NODEID": "1",
        "KILN_NEURON_CACHE_ROOT": "/fsx/neuron-compile-cache",
        "FI_PROVIDER": "efa",
        "NEURON_CC_FLAGS": "--cache_dir=/fsx/neuron-cache",
        "CCOM_SOCKET_IFNAME": "ens32",
        "PATH": "/usr/bin",
        "LD_PRELOAD": "/tmp/x.so",
        "HOME": "/home/alice",
    }
    got = plan_for(environ)
    assert got.passed == (
        "CCOM_SOCKET_IFNAME",
        "FI_PROVIDER",
        "KILN_NEURON_CACHE_ROOT",
        "KILN_ROOT",
        "NEURON_CC_FLAGS",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_NODEID",
    )
    assert got.settings == {"KILN_IN_CONTAINER": "1", "PYTHONPATH": "/opt/kiln-launcher", "KILN_TRAINING_IMAGE": IMAGE}
    assert got.command == ("python3", "-m", "kiln.launcher", "train.py")
    start = got.start_command()
    assert start[start.index(got.name) :] == [got.name, "/fsx/jobs/llm", *got.command]


def test_mounts_are_fsx_the_workdir_kiln_etc_and_the_launcher_read_only(tmp_path, monkeypatch):
    assert container.FSX_MOUNT == MOUNT_POINT
    # A machine the bootstrap never ran on has no /etc/kiln to bind.
    bare = plan_for({"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}, cwd=str(tmp_path / "work"))
    assert "/etc/kiln" not in {m.target for m in bare.mounts}
    (tmp_path / "etc/kiln").mkdir(parents=True)
    got = plan_for({"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}, cwd=str(tmp_path / "work"))
    by_target = {m.target: m for m in got.mounts}
    assert by_target["/etc/kiln"].source == f"{tmp_path}/etc/kiln" and by_target["/etc/kiln"].read_only
    launcher = by_target["/opt/kiln-launcher/kiln"]
    assert launcher.read_only and Path(launcher.source) == Path(container.__file__).resolve().parent.parent
    assert not by_target[str(tmp_path / "work")].read_only
    assert by_target["/etc/kiln"].fstab() == f"{tmp_path}/etc/kiln:/etc/kiln:none:x-create=dir,bind,nosuid,nodev,ro"


def test_a_workdir_enroot_cannot_bind_is_one_line(tmp_path):
    with pytest.raises(LaunchError, match="enroot's --mount takes absolute paths without spaces"):
        plan_for({"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}, cwd="/home/alice/my job")


@pytest.mark.parametrize(
    "image",
    [
        "pytorch-training-neuronx:2.9.0",  # no registry
        "public.ecr.aws/neuron/pytorch-training-neuronx",  # no tag
        f"{IMAGE}@sha256:{'a' * 64}",  # a digest enroot 3.5 cannot import
        "public.ecr.aws/neuron/x:1;rm -rf /",
    ],
)
def test_an_image_reference_enroot_cannot_import_is_one_line(tmp_path, image):
    with pytest.raises(LaunchError, match="expected REGISTRY/REPOSITORY:TAG"):
        plan_for({"KILN_TRAINING_IMAGE": image, "KILN_ROOT": str(tmp_path)})


def test_check_says_where_the_training_python_comes_from(monkeypatch):
    from tests.support.launcher import cpu_node

    monkeypatch.setenv("KILN_IN_CONTAINER", "1")
    monkeypatch.setenv("KILN_TRAINING_IMAGE", IMAGE)
    inside = container.python_source()
    assert inside == f"python3 of the training container {IMAGE} (enroot), started by kiln-launch on the host"
    results = screen(None, cpu_node(python_source=inside), "no instance type")
    assert [(r.name, r.status, r.detail) for r in results[1:2]] == [("python", INFORMATIONAL, inside)]
    monkeypatch.delenv("KILN_IN_CONTAINER")
    assert container.python_source() == f"this node's {sys.executable} (with torch)"


def test_the_watchdog_in_the_container_sees_the_nodes_verdicts_and_hand_off(tmp_path):
    named = {"KILN_TRAINING_IMAGE": IMAGE, "KILN_ROOT": str(tmp_path)}
    assert all(m.target != "/run/kiln" for m in plan_for(named).mounts)
    (tmp_path / "run/kiln/drain-requests").mkdir(parents=True)
    [run] = [m for m in plan_for(named).mounts if m.target == "/run/kiln"]
    assert (run.source, run.read_only) == (f"{tmp_path}/run/kiln", False)
