"""The example GitHub Actions workflow: its two tiers, every kiln command in it, and its free tier run here.

The end-to-end test runs the `local` job's kiln steps as GitHub would (bash -eo pipefail, in order, honouring
`if: always()` and `if: failure()`), on a real 2-node cluster with its own prefix, names, subnet and ports.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kiln.cli.main import build_parser
from kiln.launcher import cli as launcher_cli
from kiln.launcher import smoke_options
from kiln.launcher.errors import UsageError
from kiln.local.jobs import parse_step
from tests.support.local import Settings, free_port, kiln_local
from tests.support.paths import ROOT

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
# A command's program as the workflow writes it: `kiln`, a path ending in /bin/kiln, or "$(command -v kiln)".
_PROGRAM = re.compile(r"^(?:\$\(command -v (kiln(?:-launch)?)\)|(?:\S*/bin/)?(kiln(?:-launch)?))$")
_SHELL_OPERATORS = frozenset({"||", "&&", ";", "|", "&"})
_ACTION_PIN = re.compile(r"^[\w.-]+/[\w.-]+@v\d+$")


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _triggers(workflow: dict) -> dict:
    # YAML 1.1 reads the bare key `on` as the boolean True.
    triggers = workflow.get("on", workflow.get(True))
    return {name: None for name in triggers} if isinstance(triggers, list) else triggers


@dataclass(frozen=True)
class Command:
    """One `kiln` or `kiln-launch` invocation found in a step's script."""

    job: str
    program: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.job}: {self.program} {shlex.join(self.args)}"


def _commands_in(tokens: list[str]) -> list[tuple[str, list[str]]]:
    found = []
    for index, token in enumerate(tokens):
        match = _PROGRAM.match(token)
        if match:
            args = []
            for arg in tokens[index + 1 :]:
                if arg in _SHELL_OPERATORS:
                    break
                args.append(arg)
            found.append((match.group(1) or match.group(2), args))
        elif any(c.isspace() for c in token):
            # A quoted command inside a command, e.g. sbatch --wrap "srun kiln-launch smoke".
            found.extend(_commands_in(shlex.split(token, comments=True)))
    return found


def commands(script: str) -> list[tuple[str, list[str]]]:
    """Return every kiln/kiln-launch command in the bash SCRIPT, one logical line at a time."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        found.extend(_commands_in(shlex.split(line, comments=True)))
    return found


def _all_commands() -> list[Command]:
    found = []
    for job_name, job in _workflow()["jobs"].items():
        for step in job["steps"]:
            for program, args in commands(step.get("run", "")):
                found.append(Command(job_name, program, tuple(args)))
    return found


def _kiln_steps(job: dict, *head: str) -> list[int]:
    """Return the indexes of JOB's steps that run `kiln HEAD...`."""
    return [
        index
        for index, step in enumerate(job["steps"])
        if any(program == "kiln" and args[: len(head)] == list(head) for program, args in commands(step.get("run", "")))
    ]


def _ci_registered() -> bool:
    commands_action = next(a for a in build_parser()._actions if a.dest == "command")
    return "ci" in commands_action.choices


def _assumes_role(step: dict) -> bool:
    return step.get("uses", "").startswith("aws-actions/configure-aws-credentials@")


# --- structure ---------------------------------------------------------------------------------------------------


def test_the_workflow_has_a_free_local_tier_a_cloud_tier_and_a_sweep():
    workflow = _workflow()
    assert set(workflow["jobs"]) == {"local", "cloud", "sweep"}
    assert {"push", "pull_request", "workflow_dispatch", "schedule"} <= set(_triggers(workflow))
    local = workflow["jobs"]["local"]
    assert "needs" not in local
    assert local["runs-on"] in ("ubuntu-24.04", "ubuntu-latest")
    # The free tier runs on every push and pull request; only the scheduled sweep run leaves it out.
    assert local["if"] == "github.event_name != 'schedule'"
    for action in ("up", "smoke", "run", "down"):
        assert len(_kiln_steps(local, "local", action)) == 1, f"one `kiln local {action}` step"
    up = local["steps"][_kiln_steps(local, "local", "up")[0]]
    assert "--nodes 2" in up["run"] and '--spec "$KILN_SPEC"' in up["run"]


def test_the_local_tier_never_touches_aws():
    local = _workflow()["jobs"]["local"]
    text = yaml.safe_dump(local)
    assert "configure-aws-credentials" not in text
    assert "vars." not in text and "secrets." not in text
    assert not _kiln_steps(local, "ci")


def test_the_cloud_tier_needs_the_local_tier_and_runs_on_main_or_by_hand():
    cloud = _workflow()["jobs"]["cloud"]
    assert cloud["needs"] in ("local", ["local"])
    assert "github.event_name == 'workflow_dispatch'" in cloud["if"]
    assert "github.ref == 'refs/heads/main'" in cloud["if"]
    assert "pull_request" not in cloud["if"]


def test_id_token_write_only_where_aws_credentials_are_assumed():
    workflow = _workflow()
    assert "id-token" not in workflow.get("permissions", {})
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        assumes_role = any(_assumes_role(step) for step in job["steps"])
        writes_token = job.get("permissions", {}).get("id-token") == "write"
        assert assumes_role == writes_token, f"job {name}: id-token: write exactly where it assumes an AWS role"
    assert workflow["jobs"]["cloud"]["permissions"] == {"id-token": "write", "contents": "read"}
    assert "permissions" not in workflow["jobs"]["local"]


def test_the_cloud_and_sweep_jobs_assume_the_ci_identity_deploy_role():
    jobs = _workflow()["jobs"]
    for name in ("cloud", "sweep"):
        credentials = [step for step in jobs[name]["steps"] if _assumes_role(step)]
        assert credentials, name
        for step in credentials:
            assert step["with"]["role-to-assume"] == "${{ vars.KILN_DEPLOY_ROLE_ARN }}"
            # `kiln ci identity` makes a role with one-hour sessions: asking for more fails the assume.
            assert "role-duration-seconds" not in step["with"]


def test_every_cloud_step_gets_fresh_credentials_first():
    cloud = _workflow()["jobs"]["cloud"]
    previous = -1
    for index in sorted(_kiln_steps(cloud, "ci")):
        between = [step for step in cloud["steps"][previous + 1 : index] if _assumes_role(step)]
        assert between, f"no credentials step before `{cloud['steps'][index]['name']}`"
        # The teardown's credentials are fetched whatever happened before it.
        assert between[-1].get("if") == cloud["steps"][index].get("if")
        previous = index


def test_teardown_steps_run_always():
    jobs = _workflow()["jobs"]
    for job_name, head in (("local", ("local", "down")), ("cloud", ("ci", "down"))):
        (index,) = _kiln_steps(jobs[job_name], *head)
        assert jobs[job_name]["steps"][index].get("if") == "always()", f"{job_name}: kiln {' '.join(head)}"


def test_the_cloud_tier_calls_up_then_run_then_down():
    cloud = _workflow()["jobs"]["cloud"]
    (up,) = _kiln_steps(cloud, "ci", "up")
    (run,) = _kiln_steps(cloud, "ci", "run")
    (down,) = _kiln_steps(cloud, "ci", "down")
    assert up < run < down
    assert cloud["steps"][up]["id"] == "up"
    assert "--ttl 2h" in cloud["steps"][up]["run"] and "--outputs ci-outputs.json" in cloud["steps"][up]["run"]
    assert "sbatch --wait" in cloud["steps"][run]["run"]
    # Nothing between up and down may skip down: only `down` itself decides with always().
    assert cloud["steps"][down]["if"] == "always()"


def test_the_sweep_is_scheduled_and_deletes_old_environments_only():
    workflow = _workflow()
    assert _triggers(workflow)["schedule"], "the sweep needs a cron schedule"
    sweep = workflow["jobs"]["sweep"]
    assert sweep["if"] == "github.event_name == 'schedule'"
    (index,) = _kiln_steps(sweep, "ci", "sweep")
    assert "--older-than" in sweep["steps"][index]["run"]
    assert "--dry-run" not in sweep["steps"][index]["run"]


def test_actions_are_pinned_by_major_tag_and_concurrency_is_set_per_job():
    for name, job in _workflow()["jobs"].items():
        for step in job["steps"]:
            if "uses" in step:
                assert _ACTION_PIN.match(step["uses"]), f"{name}: {step['uses']} (pin a major tag, e.g. @v4)"
        assert job["concurrency"]["group"], name
    assert _workflow()["jobs"]["cloud"]["concurrency"]["cancel-in-progress"] is False


def test_the_install_uses_kiln_pip_spec_and_the_cpu_torch_wheel():
    workflow = _workflow()
    assert workflow["env"]["KILN_PIP_SPEC"].startswith("kiln[launcher] @ git+https://")
    assert workflow["env"]["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"
    for name, job in workflow["jobs"].items():
        installs = [s for s in job["steps"] if s.get("name") == "Install kiln"]
        assert len(installs) == 1, name
        assert '--extra-index-url "$TORCH_INDEX" "$KILN_PIP_SPEC"' in installs[0]["run"]


def test_the_cdk_cli_and_node_are_the_ones_kiln_pins():
    cloud = _workflow()["jobs"]["cloud"]
    package = json.loads((ROOT / "package.json").read_text())
    assert cloud["env"]["CDK_CLI_VERSION"] == package["devDependencies"]["aws-cdk"]
    (node,) = [s for s in cloud["steps"] if s.get("uses", "").startswith("actions/setup-node@")]
    assert node["with"]["node-version"] == package["devDependencies"]["node"].split(".")[0]
    # kiln ci up deploys with $KILN_CDK: the CLI this job installs, not one npx fetches again.
    assert cloud["env"]["KILN_CDK"] == "cdk"
    assert any('"aws-cdk@$CDK_CLI_VERSION"' in s.get("run", "") for s in cloud["steps"])


@pytest.mark.parametrize("command", _all_commands(), ids=str)
def test_every_kiln_command_parses_with_kilns_own_parser(command: Command, capsys):
    if command.program == "kiln-launch":
        try:
            parsed = launcher_cli.build_parser().parse_args(list(command.args))
            if parsed.command == "smoke":
                smoke_options.parse_args(parsed.args)
        except UsageError as error:
            pytest.fail(f"`{command}` does not parse: {error}")
        return
    if command.args[:1] == ("ci",) and not _ci_registered():
        pytest.skip("`kiln ci` is not registered in kiln.cli yet, so its commands cannot be parsed")
    try:
        build_parser().parse_args(list(command.args))
    except SystemExit as exit_:
        pytest.fail(f"`{command}` does not parse (exit {exit_.code}): {capsys.readouterr().err.strip()}")


def test_the_workflow_has_kiln_commands_of_both_tiers():
    found = {(c.job, *c.args[:2]) for c in _all_commands() if c.program == "kiln"}
    wanted = {("local", "local", "up"), ("local", "local", "down"), ("cloud", "ci", "up"), ("sweep", "ci", "sweep")}
    assert wanted <= found


# --- the free tier, run here ----------------------------------------------------------------------------------------


def _sudo_shim(bin_dir: Path) -> None:
    """Write a `sudo` that drops its options (the workflow passes --preserve-env=...) and runs the command as root."""
    bin_dir.mkdir()
    shim = bin_dir / "sudo"
    shim.write_text('#!/bin/bash\nwhile [[ "${1:-}" == -* ]]; do shift; done\nexec "$@"\n')
    shim.chmod(0o755)


def _isolated(script: str, settings: Settings) -> str:
    """Return SCRIPT with `local up` given names, a subnet and ports no other cluster here uses."""
    flags = (
        f"--tag {settings.tag} --subnet {settings.subnet} "
        f"--slurmctld-port {settings.slurmctld_port} --slurmd-port {settings.slurmd_port}"
    )
    isolated, count = re.subn(r"\blocal up\b", f"local up {flags}", script)
    assert count <= 1
    return isolated


def _steps_run(stdout: str) -> list:
    return [step for line in stdout.splitlines() if (step := parse_step(line.removeprefix("  | ")))]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.xdist_group("kiln-local")
def test_the_local_tier_runs_here(e2e_ready, searchable_dir, tmp_path):
    workflow = _workflow()
    job = workflow["jobs"]["local"]
    env_values = {**workflow["env"], **job["env"]}
    assert not any("${{" in str(v) for v in env_values.values()), "the local job's env must be plain values"
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "kiln").exists() and (venv_bin / "kiln-launch").exists()

    pid = os.getpid()
    settings = Settings(
        prefix=searchable_dir / "ci-workflow",
        tag=f"kw{pid % 10000}",
        # 10.76: away from a developer's 10.77.0.0/24 and the other local tests' 10.78-10.79.
        subnet=f"10.76.{pid % 250}.0/24",
        slurmctld_port=free_port(),
        slurmd_port=free_port(),
    )
    # The checkout: the spec where the workflow says it is.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(ROOT / "examples" / "quickstart.yaml", workspace / env_values["KILN_SPEC"])
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    _sudo_shim(tmp_path / "shim")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "SLURM_", "GITHUB_", "RUNNER_"))}
    env.update({k: str(v) for k, v in env_values.items()})
    env.update(
        KILN_LOCAL_PREFIX=str(settings.prefix),
        RUNNER_TEMP=str(runner_temp),
        GITHUB_WORKSPACE=str(workspace),
        PATH=f"{tmp_path / 'shim'}{os.pathsep}{venv_bin}{os.pathsep}{env.get('PATH', '')}",
    )

    # The steps before the cluster (checkout, Python, install) are what this venv already is.
    first = _kiln_steps(job, "local", "up")[0]
    assert all("uses" in s or s.get("name") == "Install kiln" for s in job["steps"][:first])
    steps = [step for index, step in enumerate(job["steps"]) if index in _kiln_steps(job, "local")]

    results: dict[str, subprocess.CompletedProcess] = {}
    failed = False
    try:
        for number, step in enumerate(steps):
            condition = step.get("if")
            assert condition in (None, "always()", "failure()"), f"{step['name']}: if: {condition}"
            if (condition is None and failed) or (condition == "failure()" and not failed):
                continue
            script = tmp_path / f"step{number}.sh"
            script.write_text(_isolated(step["run"], settings))
            result = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=workspace,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            results[step["name"]] = result
            failed = failed or result.returncode != 0
    finally:
        if (settings.prefix / "state.json").exists():
            kiln_local("down", "--prefix", str(settings.prefix))

    report = "\n".join(
        f"--- {name}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}" for name, r in results.items()
    )
    assert not failed, report
    assert [name for name in results] == [s["name"] for s in steps if s.get("if") != "failure()"], report
    by_head = {tuple(commands(s["run"])[0][1][:2]): results[s["name"]] for s in steps if s["name"] in results}

    up = by_head[("local", "up")]
    assert "cluster up in" in up.stdout, report
    assert re.search(rf"node1\s+{re.escape(settings.subnet.rsplit('.', 1)[0])}\.\d+\s+idle", up.stdout), up.stdout

    # kiln's own smoke job: both nodes, every step the workflow asked for, the loss falls.
    smoke = by_head[("local", "smoke")]
    assert "ddp over 2 rank(s) on cpu" in smoke.stdout
    wanted = build_parser().parse_args(commands(job["steps"][_kiln_steps(job, "local", "smoke")[0]]["run"])[0][1])
    trained = _steps_run(smoke.stdout)
    assert [s.step for s in trained] == list(range(1, wanted.steps + 1)), smoke.stdout
    assert trained[-1].loss < trained[0].loss, smoke.stdout
    assert re.search(r"smoke: job \d+ COMPLETED \(exit 0\) on node\[1-2\]", smoke.stdout), smoke.stdout

    # The user's command through `kiln local run`: the launcher from this venv, ranks on both nodes.
    own = by_head[("local", "run")]
    assert "ddp over 2 rank(s) on cpu" in own.stdout, own.stdout + own.stderr
    assert "smoke: done, final loss" in own.stdout
    assert len(_steps_run(own.stdout)) >= 1
    summaries = list((runner_temp / "checkpoints").glob("*/smoke-summary.json"))
    assert len(summaries) == 1, "checkpoints go where the workflow's --checkpoint-dir says"
    assert json.loads(summaries[0].read_text())["world_size"] == 2

    down = by_head[("local", "down")]
    assert "nothing left behind" in down.stdout
    assert not settings.prefix.exists()
    assert settings.tag not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
