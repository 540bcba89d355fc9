"""`kiln ci identity`, run in-process: a linted cloud assembly and the deploy command, or one line and exit 2."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.cli.ci_identity import BRANCH_TRUST, props_from_args, register_identity
from kiln.contracts.execution_policy import MANAGED_POLICY_MAX_CHARS, policy_size
from kiln.host.safe_output import MARKER
from kiln.stacks.synth import lint_template

STACK = "kiln-ci-identity-octo-org-kiln"


def parser() -> argparse.ArgumentParser:
    """`kiln ci` as the lead's kiln/cli/ci.py builds it, reduced to the identity action."""
    top = argparse.ArgumentParser(prog="kiln ci")
    register_identity(top.add_subparsers(dest="ci_command", required=True, metavar="ACTION"))
    return top


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def run(*argv: str) -> Run:
    """Run `kiln ci ARGV...` in this process and capture what it prints."""
    out, err = io.StringIO(), io.StringIO()
    args = parser().parse_args(argv)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = int(args.func(args))
    return Run(code, out.getvalue(), err.getvalue())


def _identity_args(out: Path, *extra: str) -> list[str]:
    return ["identity", "--repository", "octo-org/kiln", "--cluster", "ci-smoke", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    out = tmp_path_factory.mktemp("identity") / "assembly"
    return out, run(*_identity_args(out, "--environment", "ci", "--cluster", "llm"))


def test_writes_a_clean_assembly_and_prints_the_deploy_command(written: tuple[Path, Run]) -> None:
    out, result = written
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    summary, deploy, *create, bootstrap = result.stdout.splitlines()
    assert summary.startswith(
        f"kiln ci identity: wrote {out}: stack {STACK} trusting repo:octo-org/kiln:environment:ci;"
    )
    assert "cfn-lint 0 errors, 0 warnings; cdk-nag 0 open" in summary
    assert summary.endswith(f"; {len(create)} CloudFormation execution policies in {out}/execution-policies")
    assert deploy == f"npx cdk deploy --app {out} --require-approval never"
    assert (out / f"{STACK}.template.json").is_file() and (out / MARKER).is_file()
    # The recipe: each policy created from its file, then a bootstrap that hands CloudFormation those, not admin.
    names = [f"kiln-ci-exec-octo-org-kiln-{n}" for n in range(1, len(create) + 1)]
    assert create == [
        f"aws iam create-policy --policy-name {name} --policy-document file://{out}/execution-policies/{name}.json"
        for name in names
    ]
    arns = ",".join(f"arn:aws:iam::ACCOUNT:policy/{name}" for name in names)
    assert bootstrap == f"npx cdk bootstrap aws://ACCOUNT/REGION --cloudformation-execution-policies {arns}"


def test_the_execution_policies_fit_iam_and_name_only_the_listed_clusters(written: tuple[Path, Run]) -> None:
    out, _ = written
    files = sorted((out / "execution-policies").glob("*.json"))
    assert 1 <= len(files) <= 10
    documents = [json.loads(path.read_text()) for path in files]
    assert all(policy_size(document) <= MANAGED_POLICY_MAX_CHARS for document in documents)
    statements = [s for document in documents for s in document["Statement"]]
    assert all("*" not in s["Action"] for s in statements)
    # Beside the Allows, two Denies: kiln's permissions boundary stays as made, and on every role that carries it.
    denies = {s["Sid"]: s for s in statements if s["Effect"] == "Deny"}
    assert sorted(denies) == ["KeepBoundary", "NeverUnbound"]
    assert denies["KeepBoundary"]["Resource"] == "arn:aws:iam::${aws:PrincipalAccount}:policy/kiln-permissions-boundary"
    stacks = next(s for s in statements if s["Sid"] == "Stacks")
    assert stacks["Resource"] == [
        "arn:aws:cloudformation:*:${aws:PrincipalAccount}:stack/ci-smoke-*/*",
        "arn:aws:cloudformation:*:${aws:PrincipalAccount}:stack/llm-*/*",
    ]


def test_the_template_passes_cfn_lint_and_trusts_only_what_was_listed(written: tuple[Path, Run]) -> None:
    out, _ = written
    template_path = out / f"{STACK}.template.json"
    assert lint_template(template_path, "us-east-1") == ([], [])
    template = json.loads(template_path.read_text())
    (role,) = (r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role")
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    # Only the environment was listed: runs on main are not trusted.
    assert statement["Condition"]["StringLike"] == {
        "token.actions.githubusercontent.com:sub": ["repo:octo-org/kiln:environment:ci"]
    }
    assert template["Outputs"]["DeployRoleArn"]["Value"]["Fn::GetAtt"][1] == "Arn"


def test_rewrites_its_own_assembly(written: tuple[Path, Run]) -> None:
    out, _ = written
    again = run(*_identity_args(out, "--allow-branch-trust", "--branch", "main"))
    assert again.code == 0, again.stderr
    assert "trusting repo:octo-org/kiln:ref:refs/heads/main;" in again.stdout


def test_refuses_a_non_empty_directory_kiln_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    result = run(*_identity_args(tmp_path))
    assert result.code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"kiln ci identity --out: refusing {tmp_path}: it is not empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# A refused prop names the props class first.
REFUSED = "kiln ci identity: GithubDeployIdentityProps."


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--repository", "octo-org"], f"{REFUSED}repository: got 'octo-org'; allowed: OWNER/NAME"),
        (["--repository", "o/r", "--cluster", "Bad_Name"], f"{REFUSED}cluster_names: got 'Bad_Name'"),
        (
            ["--repository", "o/r", "--allow-branch-trust", "--branch", "refs/heads/x"],
            f"{REFUSED}branches: got 'refs/heads/x'",
        ),
        (["--repository", "o/r", "--branch", "main"], f"kiln ci identity: {BRANCH_TRUST}"),
        (["--repository", "o/r", "--pull-requests"], f"kiln ci identity: {BRANCH_TRUST}"),
        (
            ["--repository", "o/r", "--cluster", "ci-x"],
            f"{REFUSED}cluster_names: got ['ci', 'ci-x']; allowed: names none of which starts with another's",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, flags: list[str], message: str) -> None:
    out = tmp_path / "assembly"
    argv = ["identity", "--cluster", "ci", "--out", str(out), *flags]
    result = run(*argv)
    assert result.code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message)
    assert not out.exists()


def test_the_kiln_ci_environment_is_trusted_unless_branch_trust_is_asked_for() -> None:
    def subjects(*flags: str) -> tuple[str, ...]:
        args = parser().parse_args(["identity", "--repository", "o/r", "--cluster", "ci", "--out", "x", *flags])
        return props_from_args(args).subjects

    assert subjects() == ("repo:o/r:environment:kiln-ci",)
    assert subjects("--environment", "gpu-ci") == ("repo:o/r:environment:gpu-ci",)
    # Branch-only trust, as before, only when asked for by name.
    assert subjects("--allow-branch-trust", "--branch", "main") == ("repo:o/r:ref:refs/heads/main",)
    assert subjects("--allow-branch-trust", "--pull-requests") == ("repo:o/r:pull_request",)
    assert subjects("--allow-branch-trust", "--branch", "dev", "--environment", "ci") == (
        "repo:o/r:environment:ci",
        "repo:o/r:ref:refs/heads/dev",
    )


def test_kiln_ci_identity_is_wired_into_the_kiln_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kiln.cli.main import main

    (tmp_path / "notes.txt").write_text("mine\n")
    assert main(["ci", *_identity_args(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("kiln ci identity --out: refusing")
    assert len(captured.err.splitlines()) == 1
