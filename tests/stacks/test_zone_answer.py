"""One answer for a new VPC's second AZ (issue 46, item 5): `kiln validate`, kiln's own synthesis (`kiln diff`,
`kiln report`, `kiln ci up`) and the CDK CLI's take the same AZs, the spec's or CDK's lookup as cdk.context.json
records it, and say which were looked up; a Slurm backend's VPC keeps one AZ whatever the account lists."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Annotations, Match, Template
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as MOTO_ACCOUNT

from kiln.catalog.network import recorded_zones, zones_context_key, zones_fallback_key
from kiln.contracts.errors import InputError
from kiln.spec import SpecError
from kiln.spec.load import parse_spec
from kiln.stacks.app import new_app
from kiln.stacks.network import NetworkStack
from kiln.stacks.synth import synthesize
from kiln.stacks.zones import ACCOUNT_VARIABLE, looked_up, read_cdk_context, zone_choice
from tests.support.network_zones import (
    ACCOUNT,
    ACCOUNT_ENV,
    AGNOSTIC_ACCOUNT,
    EKS,
    HYPERPOD_EKS,
    missing_context,
    network,
    spec_of,
    subnet_zones,
)
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`): the kiln diff tests synthesize an EKS cluster three times.
pytestmark = pytest.mark.slow

# An account whose lookup skips us-east-1b, so a second AZ of us-east-1c can only come from the recorded list.
ZONES = ["us-east-1a", "us-east-1c", "us-east-1d"]
LOOKUP = f"availability-zones:account={ACCOUNT}:region=us-east-1"
SLURM = {
    "pcs": None,
    "parallelcluster": {**EKS, "backend": "parallelcluster"},
    "hyperpod-slurm": {**HYPERPOD_EKS, "orchestrator": "slurm"},
}
LOOKED_UP = (
    "second AZ us-east-1c (looked up, ./cdk.context.json): the first AZ of us-east-1 other than us-east-1a that "
    f"CDK's lookup lists for account {ACCOUNT}"
)


@pytest.fixture(autouse=True)
def _no_account(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start each test as a shell without CDK_DEFAULT_ACCOUNT (the CDK CLI sets it for the app alone)."""
    monkeypatch.delenv(ACCOUNT_VARIABLE, raising=False)


def _spec_file(directory: Path, compute: dict | None, name: str = "cluster.yaml") -> str:
    data = copy.deepcopy(MINIMAL_SPEC)
    if compute is not None:
        data["compute"] = copy.deepcopy(compute)
    path = directory / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _record(directory: Path, zones: list[str] = ZONES) -> None:
    """Write DIRECTORY/cdk.context.json as the CDK CLI leaves it after looking the account's AZs up."""
    (directory / "cdk.context.json").write_text(json.dumps({LOOKUP: zones, "other:key": "value"}, indent=2))


def _subnets(stack: cdk.Stack) -> dict[str, str]:
    """Return the AZ of each subnet of STACK's template, by logical ID."""
    resources = Template.from_stack(stack).find_resources("AWS::EC2::Subnet")
    return {name: resource["Properties"]["AvailabilityZone"] for name, resource in resources.items()}


@pytest.mark.parametrize("backend", sorted(SLURM))
def test_a_slurm_backend_keeps_one_az_whatever_the_account_lists(backend: str) -> None:
    stack = network(spec_of(SLURM[backend]), env=ACCOUNT_ENV, zones=ZONES)
    assert subnet_zones(stack) == ["us-east-1a"]
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::Subnet", 2)
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    assert not Annotations.from_stack(stack).find_info("*", Match.string_like_regexp("second AZ"))


@pytest.mark.parametrize("backend", sorted(SLURM))
def test_without_availability_zone_a_slurm_vpc_takes_one_az_and_eks_two(backend: str) -> None:
    # The region's first AZ for Slurm; its first two where an EKS control plane needs them (an earlier kiln gave
    # every VPC two).
    data = copy.deepcopy(MINIMAL_SPEC)
    data.pop("availability_zone", None)
    slurm = parse_spec({**data, "compute": copy.deepcopy(SLURM[backend] or MINIMAL_SPEC["compute"])}, "spec.yaml")
    eks = parse_spec({**data, "compute": copy.deepcopy(EKS)}, "spec.yaml")
    assert subnet_zones(network(slurm, env=ACCOUNT_ENV, zones=ZONES)) == ["us-east-1a"]
    assert subnet_zones(network(eks, env=ACCOUNT_ENV, zones=ZONES)) == ["us-east-1a", "us-east-1c"]


def test_the_context_key_is_the_one_cdk_records_its_lookup_under() -> None:
    # platforms.json's key format (the CDK guide's), held to what aws-cdk-lib asks the CLI to look up.
    assert missing_context(network(spec_of(EKS), env=ACCOUNT_ENV)) == [zones_context_key(ACCOUNT, "us-east-1")]
    assert zones_context_key(ACCOUNT, "us-east-1") == LOOKUP
    context = {
        LOOKUP: ZONES,
        "availability-zones:account=210987654321:region=us-east-1": ["us-east-1b"],
        "availability-zones:account=123456789012:region=us-east-2": ["us-east-2a"],
        "ami:account=123456789012:region=us-east-1": ["ami-1"],
        "availability-zones:account=123456789012:region=us-east-1:extra=1": ["us-east-1f"],
    }
    assert recorded_zones(context, "us-east-1") == {ACCOUNT: ZONES, "210987654321": ["us-east-1b"]}


def test_kilns_synthesis_takes_the_az_the_cli_recorded_as_the_cli_does(tmp_path: Path, monkeypatch) -> None:
    _record(tmp_path)
    spec = spec_of(EKS)
    cli = network(spec, env=ACCOUNT_ENV, zones=ZONES)  # the CDK CLI's app: its account, the recorded lookup
    assert subnet_zones(cli) == ["us-east-1a", "us-east-1c"]
    (info,) = Annotations.from_stack(cli).find_info("*", Match.string_like_regexp("second AZ"))
    assert info.entry.data == LOOKED_UP.replace("./cdk.context.json", "cdk.context.json")
    for account in (None, ACCOUNT):  # kiln's commands, with and without CDK_DEFAULT_ACCOUNT in the shell
        if account:
            monkeypatch.setenv(ACCOUNT_VARIABLE, account)
        choice = zone_choice(spec, tmp_path)
        assert choice.lines == (LOOKED_UP.replace("./cdk.context.json", str(tmp_path / "cdk.context.json")),)
        app = new_app()
        for key, value in choice.context.items():
            app.node.set_context(key, value)
        env = ACCOUNT_ENV if account else AGNOSTIC_ACCOUNT
        kiln = NetworkStack(app, "t-network", spec=spec, env=env)
        assert _subnets(kiln) == _subnets(cli)
        assert zones_fallback_key() in choice.context


def test_validate_asks_for_the_second_az_where_no_lookup_is_recorded(tmp_path: Path, monkeypatch, capsys) -> None:
    from kiln.cli.main import main

    monkeypatch.chdir(tmp_path)
    eks, pcs = _spec_file(tmp_path, EKS, "eks.yaml"), _spec_file(tmp_path, None, "pcs.yaml")
    assert main(["validate", eks, pcs]) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith(
        f"{eks}: network.second_availability_zone: is required on eks, whose control plane needs subnets in 2 AZs, "
        "when no lookup of an account's AZs of us-east-1 is recorded in ./cdk.context.json: set it to another AZ of "
        "us-east-1 than us-east-1a"
    )
    assert "`npx cdk synth` or deploy with credentials records the account's AZs in ./cdk.context.json" in line
    # The PCS spec needs no second AZ: ok, and no AZ line.
    assert out.startswith(f"{pcs}: ok (pcs;") and "second AZ" not in out and eks not in out
    # Once the CLI has recorded its lookup, validate says which AZ it gave.
    _record(tmp_path)
    assert main(["validate", eks]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == [
        f"{eks}: ok (eks; group gpu: up to 2x p5.48xlarge with 8 H100 GPUs each); boot-ready",
        f"  {LOOKED_UP}",
    ]
    # The spec's own second AZ needs no lookup: nothing to say.
    data = yaml.safe_load(Path(eks).read_text())
    data["network"] = {"second_availability_zone": "us-east-1d"}
    Path(eks).write_text(yaml.safe_dump(data))
    assert main(["validate", eks]) == 0
    assert "second AZ" not in capsys.readouterr().out


def test_report_names_the_field_in_its_table_as_validate_does(tmp_path: Path, monkeypatch, capsys) -> None:
    from kiln.cli.main import main

    monkeypatch.chdir(tmp_path)
    eks = _spec_file(tmp_path, EKS)
    assert main(["report", "--no-lint", eks]) == 2
    captured = capsys.readouterr()
    out, lines = captured.out.splitlines(), (captured.out + captured.err).splitlines()
    assert any(line.startswith(eks) and "(invalid spec)" in line for line in out), out
    assert [line for line in lines if line.startswith(f"{eks}: network.second_availability_zone: is required on eks")]


def test_several_accounts_need_cdk_default_account_to_choose(monkeypatch) -> None:
    spec = spec_of(EKS)
    other = "availability-zones:account=210987654321:region=us-east-1"
    context = {LOOKUP: ZONES, other: ["us-east-1a", "us-east-1d"]}
    with pytest.raises(SpecError) as caught:
        looked_up(spec, context, None, "./cdk.context.json")
    (line,) = caught.value.lines_out()
    assert (
        "when ./cdk.context.json records the AZs of us-east-1 for several accounts (123456789012, 210987654321) and "
        "CDK_DEFAULT_ACCOUNT does not say which one this cluster deploys to (set it): set it to another AZ" in line
    )
    chosen = looked_up(spec, context, "210987654321", "here")
    assert chosen.lines[0].startswith("second AZ us-east-1d (looked up, here)")
    with pytest.raises(SpecError, match="no lookup of account 999999999999's AZs of us-east-1 is recorded in here"):
        looked_up(spec, context, "999999999999", "here")
    with pytest.raises(SpecError, match="when the account lists no AZ of us-east-1 besides us-east-1a"):
        looked_up(spec, {LOOKUP: ["us-east-1a"]}, None, "here")


def test_a_bad_cdk_context_file_is_one_line(tmp_path: Path) -> None:
    assert read_cdk_context(tmp_path) == {}
    for text in ("{not json", "[1, 2]"):
        (tmp_path / "cdk.context.json").write_text(text)
        with pytest.raises(InputError, match=r"cdk.context.json: not a JSON object: the CDK CLI writes this file"):
            read_cdk_context(tmp_path)


def _kiln_diff(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    from kiln.cli.main import main

    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), [line for line in err.splitlines() if not line.startswith(("b'", "!!"))]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The templates the CDK CLI deploys for an EKS spec that leaves its second AZ to the lookup: the app gets the
    deploying account (CDK_DEFAULT_ACCOUNT) and cdk.context.json's lookup as its context."""
    directory = tmp_path_factory.mktemp("deployed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ACCOUNT_VARIABLE, ACCOUNT)
        synthesize(spec_of(EKS), directory / "cdk.out", nag=False, context={LOOKUP: ZONES})
    return directory / "cdk.out"


def test_kiln_diff_compares_with_the_azs_the_cli_recorded(tmp_path: Path, monkeypatch, capsys, deployed) -> None:
    monkeypatch.chdir(tmp_path)
    spec = _spec_file(tmp_path, EKS)
    _record(tmp_path)
    for account in (None, ACCOUNT):
        if account:
            monkeypatch.setenv(ACCOUNT_VARIABLE, account)
        code, out, err = _kiln_diff(capsys, "--spec", spec, "--stack-templates", str(deployed))
        assert err == [f"kiln diff: {spec}: {LOOKED_UP}"]
        assert (code, out) == (
            0,
            [
                f"kiln diff: 3 stacks compared with {deployed}; nothing is refused, and no stateful resource is "
                "replaced or dropped"
            ],
        )


def test_kiln_diff_says_in_one_line_that_no_lookup_is_recorded(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    spec = _spec_file(tmp_path, EKS)
    # With an account in the shell, CDK would answer with its placeholders (dummy1a...): no comparison of those.
    monkeypatch.setenv(ACCOUNT_VARIABLE, ACCOUNT)
    code, out, err = _kiln_diff(capsys, "--spec", spec, "--stack-templates", str(tmp_path))
    assert (code, out) == (2, [])
    (line,) = err
    assert line.startswith(f"{spec}: network.second_availability_zone: is required on eks")
    assert f"when no lookup of account {ACCOUNT}'s AZs of us-east-1 is recorded in ./cdk.context.json" in line


def test_kiln_diff_synthesizes_for_the_account_the_cli_deploys_to(tmp_path: Path, monkeypatch, deployed) -> None:
    import argparse

    from kiln.aws.session import aws_session
    from kiln.cli.diff import assembly_account, deploying_account

    # A cloud assembly names the account its stacks were synthesized for; a bare directory of templates does not.
    assert assembly_account(deployed) == ACCOUNT
    assert assembly_account(tmp_path) is None
    spec = _spec_file(tmp_path, EKS)
    args = argparse.Namespace(spec=spec, before=None, stack_templates=str(deployed), region=None)
    assert deploying_account(args, None) == ACCOUNT
    offline = argparse.Namespace(**{**vars(args), "stack_templates": None, "before": spec})
    assert deploying_account(offline, None) is None
    # Against the deployed stacks: the credentials' account, as the CDK CLI's CDK_DEFAULT_ACCOUNT is.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        session = aws_session(region="us-east-1", profile=None)
        assert deploying_account(argparse.Namespace(**{**vars(args), "stack_templates": None}), session) == MOTO_ACCOUNT


def test_ci_up_takes_the_recorded_az_or_stops_before_synthesis(tmp_path: Path, monkeypatch, capsys) -> None:
    # kiln ci up deploys the assembly it synthesizes, where the CDK CLI runs no lookup: the same answer as the rest.
    from kiln.cli.main import main

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.chdir(tmp_path)
    _spec_file(tmp_path, EKS)
    synthesized: list[object] = []
    monkeypatch.setattr("kiln.ci.deploy.cdk_command", lambda environ, cwd: ["cdk"])
    monkeypatch.setattr("kiln.ci.deploy.check_cdk_version", lambda cdk, environ: None)
    monkeypatch.setattr(
        "kiln.stacks.synth.synthesize", lambda spec, out, ci=None, context=None: synthesized.append(context)
    )
    monkeypatch.setattr("kiln.ci.deploy.deploy_stacks", lambda *args, **kwargs: pytest.fail("deployed"))
    argv = ["ci", "up", "--spec", "cluster.yaml", "--run-id", "7", "--skip-preflight", "--accept-unready"]
    with mock_aws():
        assert main([*argv, "--ttl", "1h"]) == 2
        err = capsys.readouterr().err
        assert "network.second_availability_zone: is required on eks" in err and synthesized == []
        _record(tmp_path)
        with pytest.raises(pytest.fail.Exception, match="deployed"):
            main([*argv, "--ttl", "1h"])
    assert LOOKED_UP in capsys.readouterr().err
    (context,) = synthesized
    assert context[LOOKUP] == ZONES and context[zones_fallback_key()] == ZONES
