"""The README's "Run your own job locally", word for word: its script and its commands on a real 2-node cluster.

The commands run one by one, as a user types them in a clone (`.venv` beside the script), with no venv on PATH:
only the cluster's own isolation (prefix, names, subnet, ports) is added, so nothing collides with a developer's
cluster or another test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.local import Settings, free_port, kiln_local
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

README = ROOT / "README.md"
# The document whose section is run, word for word.
DOCS = README
SECTION = "## Run your own job locally"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
_SCRIPT_NAME = re.compile(r"^# (\w+\.py): ")
_STEP = re.compile(r"^rank (\d+) of (\d+): step (\d+) loss ([0-9.]+)$", re.M)
_SAVED = re.compile(r"^rank 0 saved (\S+)$", re.M)


def section(text: str) -> str:
    """Return the text of SECTION in TEXT, up to the next heading of its level."""
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks() -> tuple[str, str, str]:
    """Return the section's script name, its script and its commands: its one python block and one bash block."""
    found = _FENCE.findall(section(DOCS.read_text()))
    assert [language for language, _ in found] == ["python", "bash"], found
    script, commands = found[0][1], found[1][1]
    name = _SCRIPT_NAME.match(script)
    assert name, f"the script's first line names its file (`# train.py: ...`), got {script.splitlines()[0]!r}"
    return name.group(1), script, commands


def command_lines(commands: str) -> list[str]:
    return [line for line in commands.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_section_has_a_script_that_compiles_and_runs_it_with_kiln_launch():
    name, script, commands = blocks()
    compile(script, name, "exec")
    lines = [shlex.split(line) for line in command_lines(commands)]
    assert [line[:3] for line in lines] == [[".venv/bin/kiln", "local", verb] for verb in ("up", "run", "down")]
    assert lines[1][lines[1].index("--") + 1 :] == ["kiln-launch", name]


def _isolated(line: str, settings: Settings) -> str:
    flags = (
        f"--tag {settings.tag} --subnet {settings.subnet} "
        f"--slurmctld-port {settings.slurmctld_port} --slurmd-port {settings.slurmd_port}"
    )
    return re.sub(r"\blocal up\b", f"local up {flags}", line)


def _without_kiln_on_path(path: str) -> str:
    """Return PATH without any directory holding kiln or kiln-launch: the job must find the node's launcher."""
    return os.pathsep.join(
        d for d in path.split(os.pathsep) if d and not any((Path(d) / p).exists() for p in ("kiln", "kiln-launch"))
    )


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.xdist_group("kiln-local")
def test_the_readme_job_runs_on_both_nodes_and_leaves_nothing_after_down(e2e_ready, searchable_dir, tmp_path):
    name, script, commands = blocks()
    pid = os.getpid()
    settings = Settings(
        prefix=searchable_dir / "own-job",
        tag=f"ko{pid % 10000}",
        # 10.75: away from a developer's 10.77.0.0/24 and the other local tests' 10.76 and 10.78-10.79.
        subnet=f"10.75.{pid % 250}.0/24",
        slurmctld_port=free_port(),
        slurmd_port=free_port(),
    )
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (clone / name).write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "SLURM_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(KILN_LOCAL_PREFIX=str(settings.prefix), PATH=_without_kiln_on_path(env.get("PATH", "")))

    results: list[subprocess.CompletedProcess] = []
    job = None
    try:
        for line in command_lines(commands):
            result = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _isolated(line, settings)],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            results.append(result)
            assert result.returncode == 0, f"$ {line}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            if " local run " in line:
                job = _check_the_job(result, settings)
            if " local down" in line:
                assert "nothing left behind" in result.stdout
    finally:
        if (settings.prefix / "state.json").exists():
            kiln_local("down", "--prefix", str(settings.prefix))
    assert len(results) == 3 and job is not None
    # Everything the job wrote was under the prefix, and `down` removed the prefix.
    assert not settings.prefix.exists()
    assert not (Path("/fsx/checkpoints") / job).exists()


def _check_the_job(result: subprocess.CompletedProcess, settings: Settings) -> str:
    """Assert both ranks trained and everything the job wrote is under the prefix; return the job id."""
    output = result.stdout + result.stderr
    # The launcher venv has numpy beside torch: no rank warns.
    assert "Failed to initialize NumPy" not in output and "UserWarning" not in output, output
    steps: dict[int, list[float]] = {}
    for rank, world, _, loss in _STEP.findall(result.stdout):
        assert world == "2"
        steps.setdefault(int(rank), []).append(float(loss))
    assert sorted(steps) == [0, 1] and all(len(losses) == 5 for losses in steps.values()), result.stdout
    assert all(losses[-1] < losses[0] for losses in steps.values()), steps

    checkpoints = settings.prefix / "checkpoints"
    saved = _SAVED.findall(result.stdout)
    assert len(saved) == 1, result.stdout
    model = Path(saved[0])
    assert model.is_file() and model.parent.parent == checkpoints, model
    job = model.parent.name
    records = sorted((checkpoints / job / "runs").glob("*.json"))
    assert len(records) == 2, records
    loaded = [json.loads(path.read_text()) for path in records]
    assert sorted(r["environment"]["node_rank"] for r in loaded) == [0, 1]
    for record in loaded:
        assert record["status"] == "succeeded", record
        assert record["worker_env"]["KILN_CHECKPOINT_DIR"] == str(checkpoints)
        assert record["worker_env"]["KILN_INSTANCE_TYPE"] == "local"
    # torchrun's log directories went to the nodes' /tmp, under the prefix too.
    assert list((settings.prefix / "tmp").glob("torchelastic_*")), "TMPDIR is not the prefix's /tmp"
    return job
