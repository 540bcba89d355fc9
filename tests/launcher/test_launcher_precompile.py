"""kiln-launch --precompile (workers under neuron_parallel_compile) and the node's environment file (the Slurm node's
Neuron settings, the compile cache's root included, reaching the workers)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kiln.catalog import instance_type
from kiln.launcher import ncclenv, precompile
from kiln.launcher.errors import LaunchError, UsageError
from tests.support.launcher import clean_env, run_launcher


def _tool(directory: Path, *, exit_code: int = 0) -> Path:
    """A neuron_parallel_compile that records its arguments and the variables it was given, then exits."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "neuron_parallel_compile"
    tool.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"record = {{'argv': sys.argv[1:], 'env': dict(os.environ)}}\n"
        f"open({str(directory / 'called.json')!r}, 'w').write(json.dumps(record))\n"
        f"sys.exit({exit_code})\n"
    )
    tool.chmod(0o755)
    return tool


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text("")
    return script


def _env(tmp_path: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    settings = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KILN_INSTANCE_TYPE": "trn1.32xlarge",
        "KILN_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        # No node file unless a test writes one (the test machine's /etc/kiln is none of its business).
        "KILN_ROOT": str(tmp_path / "node"),
    }
    return clean_env(**(settings | extra))


def _cache_root(tmp_path: Path) -> Path:
    """The compile cache's root on a stand-in for /fsx."""
    (tmp_path / "fsx").mkdir(exist_ok=True)
    return tmp_path / "fsx" / "neuron-compile-cache"


def _node_file(tmp_path: Path) -> Path:
    path = tmp_path / "nccl.env"
    path.write_text(
        "# shellcheck shell=sh disable=SC2034\n"
        "# NCCL/EFA environment for trn1.32xlarge\n"
        f"FI_PROVIDER=efa\nKILN_NEURON_CACHE_ROOT={_cache_root(tmp_path)}\nNEURON_RT_LOG_LEVEL=INFO\n"
    )
    return path


def test_dry_run_shows_the_neuron_parallel_compile_wrapper(tmp_path: Path) -> None:
    tool = _tool(tmp_path / "bin")
    env = _env(tmp_path, tmp_path / "bin", KILN_NCCL_ENV_FILE=str(_node_file(tmp_path)))
    done = run_launcher(["--precompile", "--dry-run", str(_script(tmp_path)), "--steps", "10"], env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    command = plan["precompile"]["command"]
    assert command[0] == str(tool) and command[2:4] == ["-m", "torch.distributed.run"]
    assert command[4:] == plan["torchrun_args"] and command[-3:] == [str(tmp_path / "train.py"), "--steps", "10"]
    assert "--nproc-per-node=32" in command
    # The node's file: its compile cache's root and the spec's names, each with the file as source; the cache is
    # this run's directory under the root (a launch no scheduler named goes by "local").
    node = str(tmp_path / "nccl.env")
    root = _cache_root(tmp_path)
    assert plan["nccl_env"]["set"]["KILN_NEURON_CACHE_ROOT"] == {"value": str(root), "source": node}
    cache = plan["nccl_env"]["set"]["NEURON_COMPILE_CACHE_URL"]
    assert cache["value"] == f"{root}/{os.getuid()}/local/node-0" == plan["compile_cache"]["directory"]
    assert cache["source"].startswith("compile cache: KILN_NEURON_CACHE_ROOT/<uid>/<job name: no job name>/")
    assert not root.exists()
    assert plan["nccl_env"]["set"]["NEURON_RT_LOG_LEVEL"] == {"value": "INFO", "source": node}
    # A value the preset gives alike keeps the preset as its source.
    assert plan["nccl_env"]["set"]["FI_PROVIDER"] == {"value": "efa", "source": "preset trn1.32xlarge"}


def test_without_precompile_the_plan_has_none(tmp_path: Path) -> None:
    _tool(tmp_path / "bin")
    done = run_launcher(["--dry-run", str(_script(tmp_path))], env=_env(tmp_path, tmp_path / "bin"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["precompile"] is None


def test_precompile_runs_the_wrapper_with_the_node_environment(tmp_path: Path) -> None:
    _tool(tmp_path / "bin")
    env = _env(tmp_path, tmp_path / "bin", KILN_NCCL_ENV_FILE=str(_node_file(tmp_path)))
    done = run_launcher(["--precompile", str(_script(tmp_path))], env=env)
    assert done.returncode == 0, done.stderr
    called = json.loads((tmp_path / "bin" / "called.json").read_text())
    assert called["argv"][:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert called["argv"][-1] == str(tmp_path / "train.py")
    cache = _cache_root(tmp_path) / str(os.getuid()) / "local" / "node-0"
    assert called["env"]["NEURON_COMPILE_CACHE_URL"] == str(cache) and cache.is_dir()
    assert (called["env"]["FI_PROVIDER"], called["env"]["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")


def test_a_failed_precompile_is_the_workers_exit_code(tmp_path: Path) -> None:
    _tool(tmp_path / "bin", exit_code=3)
    done = run_launcher(["--precompile", str(_script(tmp_path))], env=_env(tmp_path, tmp_path / "bin"))
    assert done.returncode == 3
    assert "kiln-launch: failed: neuron_parallel_compile exited with 3" in done.stderr


def test_precompile_on_a_gpu_node_is_a_usage_error(tmp_path: Path) -> None:
    _tool(tmp_path / "bin")
    env = _env(tmp_path, tmp_path / "bin", KILN_INSTANCE_TYPE="p5.48xlarge")
    done = run_launcher(["--precompile", "--dry-run", str(_script(tmp_path))], env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "kiln-launch: error: --precompile: p5.48xlarge has no Neuron devices; neuron_parallel_compile precompiles "
        "Neuron graphs only"
    )


def test_precompile_does_not_apply_to_check(tmp_path: Path) -> None:
    done = run_launcher(["--precompile", "check", "--json"], env=_env(tmp_path, tmp_path / "bin"))
    assert done.returncode == 2
    assert "--precompile: runs a training script or smoke under neuron_parallel_compile, not check" in done.stderr


def test_the_wrapper_is_found_beside_the_python_of_a_venv(tmp_path: Path) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    tool = _tool(venv_bin)
    python = str(venv_bin / "python3")
    command = precompile.wrapper(instance_type("trn1.32xlarge"), "trn1.32xlarge", {"PATH": ""}, python)
    assert command == [str(tool), python, "-m", "torch.distributed.run"]
    with pytest.raises(LaunchError, match=r"^--precompile: neuron_parallel_compile is not on PATH nor beside "):
        precompile.wrapper(instance_type("trn1.32xlarge"), "trn1.32xlarge", {"PATH": ""}, str(tmp_path / "python3"))
    with pytest.raises(UsageError, match=r"^--precompile: this node's instance type is unknown; "):
        precompile.wrapper(None, None, {"PATH": str(venv_bin)}, python)


def test_a_broken_node_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nccl.env"
    path.write_text("FI_PROVIDER=efa\nexport X=1\n")
    with pytest.raises(LaunchError, match=rf"^{path}:2: expected NAME=value \(the node's environment file\)$"):
        ncclenv.node_environment({"KILN_NCCL_ENV_FILE": str(path)})
    with pytest.raises(LaunchError, match=r"^KILN_NCCL_ENV_FILE: .* does not exist"):
        ncclenv.node_environment({"KILN_NCCL_ENV_FILE": str(tmp_path / "absent")})
    assert ncclenv.node_environment({"KILN_ROOT": str(tmp_path / "no-node")}) == ({}, None)


def test_the_users_environment_and_overrides_beat_the_node_file() -> None:
    node = ({"NEURON_RT_LOG_LEVEL": "INFO", "NEURON_CC_FLAGS": "--retry_failed_compilation"}, "/etc/kiln/nccl.env")
    plan = ncclenv.plan(
        "trn1.32xlarge",
        environ={"NEURON_RT_LOG_LEVEL": "DEBUG"},
        overrides={"NEURON_CC_FLAGS": "--cache_dir=/fsx/mine"},
        node_file=node,
    )
    assert plan.to_set()["NEURON_CC_FLAGS"] == "--cache_dir=/fsx/mine"
    assert "NEURON_RT_LOG_LEVEL" not in plan.to_set()
    assert plan.kept["NEURON_RT_LOG_LEVEL"] == {"value": "DEBUG", "instead_of": "INFO", "source": "/etc/kiln/nccl.env"}
