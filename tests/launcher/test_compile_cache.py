"""The Neuron compile cache per job and node (kiln.launcher.compile_cache): <root>/<uid>/<job name>/node-<rank>, never
one directory two live launchers write, and the user's own cache kept."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest

from kiln.launcher import compile_cache, ncclenv
from kiln.launcher.environment import detect
from kiln.launcher.errors import LaunchError, UsageError
from tests.support.launcher import clean_env, run_launcher

ROOT_VARIABLE = "KILN_NEURON_CACHE_ROOT"
# Node 1 of a two-node Slurm job whose name is no path component as it stands.
SLURM = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NAME": "llama run/1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "trn-[1-2]",
}


def _root(tmp_path: Path) -> Path:
    (tmp_path / "fsx").mkdir(exist_ok=True)
    return tmp_path / "fsx" / "neuron-compile-cache"


def _choose(environ: dict[str, str], *, node_file: dict[str, str] | None = None, uid: int = 1000):
    detected = detect(environ, accelerators=lambda: (32, "NeuronCores"))
    nccl = ncclenv.plan("trn1.32xlarge", environ=environ, node_file=(node_file or {}, "/etc/kiln/nccl.env"))
    return compile_cache.choose(detected, environ, nccl, uid=uid)


def test_a_slurm_node_gets_its_job_names_and_node_ranks_directory() -> None:
    plan = _choose({**SLURM, ROOT_VARIABLE: "/fsx/neuron-compile-cache"})
    name = compile_cache.path_component("llama run/1")
    assert name.startswith("llama-run-1-") and len(name) == len("llama-run-1-") + 8
    assert plan.directory == f"/fsx/neuron-compile-cache/1000/{name}/node-1"
    assert plan.how == f"{ROOT_VARIABLE}/<uid>/<job name: SLURM_JOB_NAME>/node-<node rank: SLURM_NODEID>"
    # The root from the node's file does as well as from the environment; a --job-id names the cache as it names
    # the checkpoints.
    assert _choose(SLURM, node_file={ROOT_VARIABLE: "/fsx/c"}).directory == f"/fsx/c/1000/{name}/node-1"
    named = _choose({**SLURM, ROOT_VARIABLE: "/fsx/c", "KILN_JOB_ID": "pretrain"})
    assert named.directory == "/fsx/c/1000/pretrain/node-1"


def test_a_pytorchjob_pod_goes_by_the_jobs_name_and_its_rank() -> None:
    pod = {
        "KUBERNETES_SERVICE_HOST": "10.100.0.1",
        "PET_MASTER_ADDR": "llama-master-0",
        "PET_MASTER_PORT": "23456",
        "PET_NNODES": "4",
        "PET_NODE_RANK": "3",
        ROOT_VARIABLE: "/fsx/neuron-compile-cache",
    }
    assert _choose(pod, uid=0).directory == "/fsx/neuron-compile-cache/0/llama/node-3"
    # An elastic rendezvous ranks nodes only after the launcher starts: no directory, Neuron's node-local default.
    elastic = {k: v for k, v in pod.items() if k not in ("PET_MASTER_ADDR", "PET_NODE_RANK")}
    plan = _choose({**elastic, "PET_RDZV_ENDPOINT": "llama-master-0:29400", "PET_RDZV_ID": "llama"})
    assert plan.directory is None and plan.how.startswith("node rank unknown")


def test_the_users_own_cache_is_kept_and_no_root_means_no_plan() -> None:
    root = {ROOT_VARIABLE: "/fsx/neuron-compile-cache"}
    own_url = _choose({**SLURM, **root, "NEURON_COMPILE_CACHE_URL": "/scratch/mine"})
    assert own_url.directory is None and own_url.how == "NEURON_COMPILE_CACHE_URL is set: that cache is used as it is"
    own_flags = _choose({**SLURM, **root, "NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/fsx/team"})
    assert own_flags.directory is None and own_flags.how.startswith("NEURON_CC_FLAGS names a --cache_dir")
    from_spec = _choose({**SLURM, **root}, node_file={"NEURON_CC_FLAGS": "--cache_dir=/fsx/team"})
    assert from_spec.directory is None
    # Flags of the user's without a --cache_dir beat the spec's that have one: kiln's directory applies.
    mixed = _choose({**SLURM, **root, "NEURON_CC_FLAGS": "-O1"}, node_file={"NEURON_CC_FLAGS": "--cache_dir=/x"})
    assert mixed.directory is not None
    # No root (a node without kiln's FSx, or a GPU node): nothing to say, Neuron keeps its default.
    assert _choose(SLURM) is None


def test_a_relative_root_is_one_line() -> None:
    with pytest.raises(UsageError, match=rf"^{ROOT_VARIABLE}: expected an absolute directory \(got 'fsx/c'\)$"):
        _choose({**SLURM, ROOT_VARIABLE: "fsx/c"})


@pytest.mark.parametrize(
    ("name", "expected"),
    [("trn", "trn"), ("llm-7b_v2.1", "llm-7b_v2.1"), ("..", "job-"), ("../../etc", "etc-"), ("a" * 80, "a" * 55 + "-")],
)
def test_a_job_name_becomes_one_path_component(name: str, expected: str) -> None:
    component = compile_cache.path_component(name)
    assert component.startswith(expected) and "/" not in component and len(component) <= compile_cache.MAX_NAME_CHARS
    assert component not in (".", "..") and not component.startswith((".", "-"))
    # Names that differ only in what had to change stay apart.
    if component != name:
        assert compile_cache.path_component(name + "/") != component


def test_a_claim_locks_the_directory_and_a_second_launcher_takes_the_next(tmp_path: Path) -> None:
    planned = _root(tmp_path) / str(os.getuid()) / "trn" / "node-0"
    first, held = compile_cache.claim(str(planned))
    assert first == str(planned) and planned.is_dir() and planned.stat().st_mode & 0o777 == 0o700
    # The root is every user's, as /tmp is; the user's directory is theirs alone.
    assert _root(tmp_path).stat().st_mode & 0o7777 == 0o1777
    assert planned.parent.parent.stat().st_mode & 0o777 == 0o700
    second, other = compile_cache.claim(str(planned))
    assert second == f"{planned}.1"
    held.close()
    # Once the first launcher is gone its directory is free again: the next run of the job finds its graphs there.
    again, third = compile_cache.claim(str(planned))
    assert again == str(planned)
    other.close()
    third.close()


def test_every_directory_busy_or_unusable_is_one_line(tmp_path: Path) -> None:
    planned = _root(tmp_path) / str(os.getuid()) / "trn" / "node-0"
    locks = [compile_cache.claim(str(planned))[1] for _ in range(compile_cache.MAX_SLOTS)]
    with pytest.raises(LaunchError, match=r"and its 7 alternates are in use by other launchers of this job name"):
        compile_cache.claim(str(planned))
    for lock in locks:
        lock.close()
    # A user directory others may write is refused: the graphs in it would run as this user.
    planned.parent.parent.chmod(0o777)
    with pytest.raises(LaunchError, match=r"^the compile cache .* is not this user's own \(owner uid \d+, mode 777\)"):
        compile_cache.claim(str(planned))
    # A root whose parent is missing (FSx not mounted) is never created.
    missing = tmp_path / "not-mounted" / "neuron-compile-cache" / "1000" / "trn" / "node-0"
    with pytest.raises(LaunchError, match=r"^cannot use the compile cache .*: No such file or directory; set "):
        compile_cache.claim(str(missing))
    assert not (tmp_path / "not-mounted").exists()


def test_a_link_planted_as_the_users_directory_is_refused_whatever_it_points_at(tmp_path: Path) -> None:
    # In the shared root (mode 1777) anyone may create <root>/<uid> before its user does: a link to a directory the
    # user owns would pass an ownership check that follows links, and the user's graphs would land where it points.
    own = tmp_path / "home" / "cache"
    own.mkdir(parents=True, mode=0o700)
    root = _root(tmp_path)
    root.mkdir(parents=True, exist_ok=True)
    (root / str(os.getuid())).symlink_to(own)
    planned = root / str(os.getuid()) / "trn" / "node-0"
    with pytest.raises(LaunchError, match=r"^the compile cache .* is not this user's own \(a symbolic link to "):
        compile_cache.claim(str(planned))
    assert list(own.iterdir()) == []


def _tool(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "neuron_parallel_compile"
    tool.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        f"open({str(directory / 'cache')!r}, 'w').write(os.environ.get('NEURON_COMPILE_CACHE_URL', ''))\n"
    )
    tool.chmod(0o755)
    return tool


def test_precompile_and_the_training_run_share_a_directory_a_live_launcher_never_does(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _tool(bin_dir)
    script = tmp_path / "train.py"
    script.write_text("")
    env = clean_env(
        PATH=f"{bin_dir}:/usr/bin:/bin",
        KILN_INSTANCE_TYPE="trn1.32xlarge",
        KILN_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        KILN_ROOT=str(tmp_path / "node"),
        **SLURM,
        **{ROOT_VARIABLE: str(_root(tmp_path))},
    )
    name = compile_cache.path_component(SLURM["SLURM_JOB_NAME"])
    expected = _root(tmp_path) / str(os.getuid()) / name / "node-1"
    dry = run_launcher(["--dry-run", str(script)], env=env)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["compile_cache"]["directory"] == str(expected)
    assert planned["nccl_env"]["set"]["NEURON_COMPILE_CACHE_URL"]["value"] == str(expected)
    done = run_launcher(["--precompile", "--run-record", str(tmp_path / "run.json"), str(script)], env=env)
    assert done.returncode == 0, done.stderr
    assert (bin_dir / "cache").read_text() == str(expected)
    # Another launcher of the same job name and rank is still running: this one compiles into the next directory,
    # and its run record says so.
    with open(expected.with_name("node-1.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run_launcher(["--precompile", "--run-record", str(tmp_path / "run.json"), str(script)], env=env)
    assert done.returncode == 0, done.stderr
    assert (bin_dir / "cache").read_text() == f"{expected}.1"
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["compile_cache"]["directory"] == f"{expected}.1"
    assert record["compile_cache"]["how"].endswith(f"{expected} was in use by another launcher")
    assert record["nccl_env"]["applied"]["NEURON_COMPILE_CACHE_URL"] == f"{expected}.1"
