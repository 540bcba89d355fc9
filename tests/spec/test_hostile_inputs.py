"""The last hostile inputs of the audit's corpus (issue 32, items 8-12), each refused with one line.

Coerced types, variables that would reach root's login shells, a TTL that fires at synthesis, VPC ranges AWS does
not take, and output that floods or drives the terminal: every case goes through the real parser and rules, most of
them through `kiln validate` as a user runs it.
"""

from __future__ import annotations

import copy
import math
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from kiln.catalog import limits, nccl
from kiln.cli.main import main
from kiln.spec import ClusterSpec, Problem, SpecError, parse_spec
from kiln.spec.problems import MAX_ECHO_CHARS, MAX_MESSAGE_CHARS, MAX_PROBLEM_LINES, dotted, printable, shown
from kiln.spec.rules import ci as ci_rules
from kiln.spec.rules import launcher as launcher_rules
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as _lines

BASE = {**MINIMAL_SPEC, "name": "hostile"}


def _spec(**sections: object) -> dict:
    spec = copy.deepcopy(BASE)
    spec.update(copy.deepcopy(sections))
    return spec


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture, name: str = "cluster.yaml"):
    path = tmp_path / name
    path.write_text(text)
    code = main(["validate", "--accept-unready", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err.splitlines(), out


# --- Item 8: strict types --------------------------------------------------------------------------------------


def _unwrap(annotation: object) -> object:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def _scalar_fields(model: type[BaseModel], prefix: tuple = ()) -> list[tuple[tuple, type]]:
    """Return (path, type) of every int, bool and float field under MODEL (list items as index 0)."""
    found = []
    for name, field in model.model_fields.items():
        annotation = _unwrap(field.annotation)
        if annotation in (int, bool, float):
            found.append(((*prefix, name), annotation))
        elif typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                found += _scalar_fields(item, (*prefix, name, 0))
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _scalar_fields(annotation, (*prefix, name))
    return found


SCALAR_FIELDS = _scalar_fields(ClusterSpec)
# What pydantic's lax mode would coerce, per type, and the words of the refusal.
COERCIBLE = {
    int: (["2", "0", True, False, 2.0, "2.0"], "must be a whole number"),
    bool: (["true", "off", "yes", 0, 1, 1.0], "must be true or false"),
    float: ([True, False, "2", "0.5"], "must be a number"),
}


def _with(path: tuple, value: object) -> dict:
    spec = _spec(observability={}, ci={})
    node = spec
    for part in path[:-1]:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    node[path[-1]] = value
    return spec


def test_every_number_and_switch_of_the_spec_is_covered() -> None:
    kinds = [kind for _, kind in SCALAR_FIELDS]
    assert len(SCALAR_FIELDS) >= 19 and {int, bool, float} <= set(kinds), SCALAR_FIELDS


@pytest.mark.parametrize(("path", "kind"), SCALAR_FIELDS, ids=[dotted(p) for p, _ in SCALAR_FIELDS])
def test_a_coercible_value_of_the_wrong_type_is_one_line_naming_the_field(path: tuple, kind: type) -> None:
    values, words = COERCIBLE[kind]
    for value in values:
        lines = _lines(_with(path, value))
        assert lines == [f"x.yaml: {dotted(path)}: {words} (got {shown(value)})"], (value, lines)


def test_a_number_field_takes_a_whole_number() -> None:
    assert parse_spec(_spec(ci={"ttl_hours": 2})).ci.ttl_hours == 2.0


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ('max_count: "2"', "compute.groups[0].max_count", "must be a whole number (got '2')"),
        ("max_count: true", "compute.groups[0].max_count", "must be a whole number (got True)"),
        ("max_count: 2.0", "compute.groups[0].max_count", "must be a whole number (got 2.0)"),
        ('retain: "off"', "storage.bucket.retain", "must be true or false (got 'off')"),
        ("retain: 0", "storage.bucket.retain", "must be true or false (got 0)"),
        ("ttl_hours: true", "ci.ttl_hours", "must be a number (got True)"),
        ('ttl_hours: "2"', "ci.ttl_hours", "must be a number (got '2')"),
        ('efa: "true"', "storage.lustre.efa", "must be true or false (got 'true')"),
    ],
)
def test_the_audits_coerced_values_are_refused_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture, text: str, field: str, words: str
) -> None:
    key, value = text.split(": ", 1)
    spec = _spec(storage={"bucket": {}, "lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}}, ci={})
    owner = {"max_count": spec["compute"]["groups"][0], "retain": spec["storage"]["bucket"]}
    owner.update({"ttl_hours": spec["ci"], "efa": spec["storage"]["lustre"]})
    owner[key][key] = yaml.safe_load(value)
    code, lines, _ = _validate(tmp_path, yaml.safe_dump(spec), capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f": {field}: {words}" in lines[0]


# --- Item 9: launcher.nccl_env holds NCCL's and libfabric's variables only ----------------------------------------

SHELL_VARIABLES = [
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "BASH_ENV",
    "ENV",
    "PATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PROMPT_COMMAND",
    "HOME",
    "KILN_NCCL_ENV",
    "KILN_STEP",
    "NCCL",
    "FI",
    "XNCCL_DEBUG",
]


@pytest.mark.parametrize("name", SHELL_VARIABLES)
def test_a_variable_outside_nccls_and_libfabrics_families_is_refused(name: str) -> None:
    assert _lines(_spec(launcher={"nccl_env": {name: "x"}})) == [
        f"x.yaml: launcher.nccl_env.{name}: is not an NCCL, libfabric or Neuron variable: names start with NCCL_ or "
        f"FI_ or NEURON_ or CCOM_ (the families kiln's presets set) (got {name!r})"
    ]


def test_the_audits_variables_are_one_line_each_in_validate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    hostile = {"LD_PRELOAD": "/tmp/x.so", "BASH_ENV": "/tmp/x", "PATH": "/tmp", "PYTHONPATH": "/tmp", "KILN_X": "1"}
    spec = _spec(launcher={"nccl_env": {**hostile, "NCCL_DEBUG": "INFO", "FI_EFA_USE_DEVICE_RDMA": "1"}})
    code, lines, _ = _validate(tmp_path, yaml.safe_dump(spec), capsys)
    assert code == 2
    assert sorted(line.split(": ")[1] for line in lines) == sorted(f"launcher.nccl_env.{n}" for n in hostile)


def test_nccl_and_libfabric_variables_pass() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_PROVIDER": "efa",
    }
    assert parse_spec(_spec(launcher={"nccl_env": env})).launcher.nccl_env == env


def test_rdmav_keeps_its_own_reason() -> None:
    [line] = _lines(_spec(launcher={"nccl_env": {"RDMAV_FORK_SAFE": "1"}}))
    assert "must not be set: RDMAV_* variables break EFA" in line


def test_the_count_and_value_limits_are_exact() -> None:
    most = {f"NCCL_X{i}": "1" for i in range(nccl.MAX_OVERRIDES)}
    assert len(parse_spec(_spec(launcher={"nccl_env": most})).launcher.nccl_env) == nccl.MAX_OVERRIDES
    too_many = {**most, "NCCL_ONE_MORE": "1"}
    assert _lines(_spec(launcher={"nccl_env": too_many})) == [
        f"x.yaml: launcher.nccl_env: at most {nccl.MAX_OVERRIDES} variables (got {nccl.MAX_OVERRIDES + 1})"
    ]
    longest_name = "NCCL_" + "X" * (nccl.MAX_OVERRIDE_NAME_CHARS - 5)
    assert parse_spec(_spec(launcher={"nccl_env": {longest_name: "1"}})).launcher.nccl_env == {longest_name: "1"}
    [line] = _lines(_spec(launcher={"nccl_env": {longest_name + "X": "1"}}))
    assert f": name is {nccl.MAX_OVERRIDE_NAME_CHARS + 1} characters; at most {nccl.MAX_OVERRIDE_NAME_CHARS}" in line
    longest = "a" * nccl.MAX_OVERRIDE_VALUE_CHARS
    assert parse_spec(_spec(launcher={"nccl_env": {"NCCL_X": longest}})).launcher.nccl_env["NCCL_X"] == longest
    [line] = _lines(_spec(launcher={"nccl_env": {"NCCL_X": longest + "a"}}))
    assert line.startswith(f"x.yaml: launcher.nccl_env.NCCL_X: value is {nccl.MAX_OVERRIDE_VALUE_CHARS + 1} characters")


def test_every_variable_a_preset_sets_is_in_an_allowed_family() -> None:
    """The allowed families are the presets' own: a new preset variable outside them would be refused as an override."""
    set_by_presets = {name for rule in nccl.presets()["rules"] for name in rule["env"]}
    assert set_by_presets and all(name.startswith(nccl.allowed_prefixes()) for name in set_by_presets)
    assert {name.split("_", 1)[0] + "_" for name in set_by_presets} == set(nccl.allowed_prefixes())


def test_the_spec_renderer_and_launcher_share_the_catalogs_rule() -> None:
    from kiln.bootstrap import config
    from kiln.launcher import ncclenv

    for module in (launcher_rules, config, ncclenv):
        assert module.override_name_problem is nccl.override_name_problem
        assert module.override_value_problem is nccl.override_value_problem


# --- Item 10: ci.ttl_hours outlasts a deploy --------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [1e-300, 0, 0.0, 0.49, -1, -math.inf, math.nan])
def test_a_ttl_shorter_than_a_deploy_is_refused(ttl: float) -> None:
    [line] = _lines(_spec(ci={"ttl_hours": ttl}))
    assert line.startswith(f"x.yaml: ci.ttl_hours: must be at least {limits.MIN_TTL_HOURS:g} hours (30 minutes) (got ")
    assert "while it is still being deployed" in line


@pytest.mark.parametrize("ttl", [limits.MAX_TTL_HOURS + 0.001, math.inf, 1e300])
def test_a_ttl_past_thirty_days_is_refused(ttl: float) -> None:
    [line] = _lines(_spec(ci={"ttl_hours": ttl}))
    assert line.startswith(f"x.yaml: ci.ttl_hours: must be at most {limits.MAX_TTL_HOURS} hours")


@pytest.mark.parametrize("ttl", [limits.MIN_TTL_HOURS, 1, 2.5, limits.MAX_TTL_HOURS])
def test_a_ttl_within_the_bounds_passes(ttl: float) -> None:
    assert parse_spec(_spec(ci={"ttl_hours": ttl})).ci.ttl_hours == ttl


def test_the_ttl_bounds_live_in_the_catalog_only() -> None:
    from kiln.stacks import ci_mode

    assert ci_rules.ttl_problem is limits.ttl_problem and ci_mode.ttl_problem is limits.ttl_problem
    assert limits.MIN_TTL_HOURS == 0.5 and limits.MAX_TTL_HOURS == 720


# --- Item 11: VPC ranges as AWS documents them --------------------------------------------------------------------


@pytest.mark.parametrize(
    "cidr",
    [
        "10.0.0.0/16",
        "10.255.0.0/16",
        "172.16.0.0/16",
        "172.31.0.0/16",
        "192.168.0.0/16",
        "100.64.0.0/16",
        "100.127.0.0/22",
    ],
)
def test_rfc_1918_and_shared_address_space_pass(cidr: str) -> None:
    assert parse_spec(_spec(network={"vpc_cidr": cidr})).network.vpc_cidr == cidr


@pytest.mark.parametrize(
    "cidr",
    [
        "169.254.0.0/16",  # link-local (Python's is_private took it)
        "127.0.0.0/16",  # loopback
        "0.0.0.0/16",  # "this network"
        "240.0.0.0/16",  # reserved
        "224.0.0.0/16",  # multicast
        "198.18.0.0/16",  # benchmarking
        "192.0.0.0/22",  # IETF protocol assignments, documentation (192.0.2.0/24)
        "8.8.0.0/16",  # public
        "100.128.0.0/16",  # just past 100.64.0.0/10
        "100.63.0.0/16",  # just before it
        "172.32.0.0/16",  # just past 172.16.0.0/12
        "11.0.0.0/16",  # just past 10.0.0.0/8
    ],
)
def test_ranges_aws_does_not_take_for_a_vpc_are_refused(cidr: str) -> None:
    assert _lines(_spec(network={"vpc_cidr": cidr})) == [
        f"x.yaml: network.vpc_cidr: must be {limits.VPC_RANGES_RULE}, such as 10.0.0.0/16 (got {cidr!r})"
    ]


def test_a_network_straddling_an_allowed_range_is_refused() -> None:
    # 10.0.0.0/7 holds 10/8 and 11/8: inside no allowed range, and larger than AWS allows.
    network = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}
    assert _lines(_spec(network={**network, "vpc_cidr": "10.0.0.0/7"})) == [
        "x.yaml: network.vpc_cidr: prefix must be /16 to /28, the sizes AWS allows for a VPC (got /7)",
        f"x.yaml: network.vpc_cidr: must be {limits.VPC_RANGES_RULE}, such as 10.0.0.0/16 (got '10.0.0.0/7')",
    ]


@pytest.mark.parametrize(("prefix", "refused"), [(15, True), (16, False), (28, False), (29, True), (32, True)])
def test_an_existing_vpcs_cidr_has_a_size_aws_allows(prefix: int, refused: bool) -> None:
    network = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}
    spec = _spec(network={**network, "vpc_cidr": f"10.0.0.0/{prefix}"})
    lines = _lines(spec)
    if not refused:
        assert lines == []
        return
    assert lines == [
        f"x.yaml: network.vpc_cidr: prefix must be /16 to /28, the sizes AWS allows for a VPC (got /{prefix})"
    ]


# --- Item 12: what a problem line echoes --------------------------------------------------------------------------


def test_three_thousand_unknown_keys_print_fifty_lines_and_a_count(tmp_path: Path, capsys) -> None:
    keys = "".join(f"k{i}: 1\n" for i in range(3000))
    code, lines, _ = _validate(tmp_path, yaml.safe_dump(BASE) + keys, capsys)
    assert code == 2 and len(lines) == MAX_PROBLEM_LINES + 1
    assert all(": unknown key" in line for line in lines[:-1])
    assert lines[-1] == f"{tmp_path / 'cluster.yaml'}: ... and {3000 - MAX_PROBLEM_LINES} more problems"


def test_exactly_the_line_limit_prints_no_count() -> None:
    problems = [Problem(path=(f"k{i}",), message="unknown key") for i in range(MAX_PROBLEM_LINES)]
    assert len(SpecError("f", problems).lines_out()) == MAX_PROBLEM_LINES
    problems.append(Problem(path=("one_more",), message="unknown key"))
    assert SpecError("f", problems).lines_out()[-1] == "f: ... and 1 more problems"


def test_a_600000_character_key_is_cut(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # An explicit key: YAML's implicit keys are limited to 1,024 characters.
    code, lines, _ = _validate(tmp_path, yaml.safe_dump(BASE) + "? " + "k" * 600_000 + "\n: 1\n", capsys)
    assert code == 2 and len(lines) == 1
    assert f": {'k' * MAX_ECHO_CHARS}... (600000 characters): unknown key" in lines[0]
    assert len(lines[0]) < 400


def test_a_600000_character_value_is_cut(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, lines, _ = _validate(tmp_path, yaml.safe_dump({**BASE, "name": "x" * 600_000}), capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].endswith(f"(got {'x' * MAX_ECHO_CHARS!r}... (600000 characters))")


def test_escapes_in_keys_and_values_never_reach_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # YAML refuses a raw ESC in a file, but its double-quoted escapes make one: \e, \x9b (CSI), \u202e (bidi).
    text = yaml.safe_dump(BASE) + '"\\e[31mred\\x9b2J": 1\ntags: {t: "\\e]0;title\\a\\u202e"}\n'
    code, lines, _ = _validate(tmp_path, text, capsys)
    assert code == 2 and len(lines) == 2
    assert all(line.isprintable() for line in lines)
    assert "'\\x1b[31mred\\x9b2J': unknown key" in lines[0]
    assert "(got '\\x1b]0;title\\x07\\u202e')" in lines[1]


def test_a_file_names_escapes_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    name = "evil\x1b[2J\n.yaml"
    code, lines, _ = _validate(tmp_path, "name: Bad\n", capsys, name=name)
    assert code == 2 and lines and all(line.isprintable() for line in lines)
    assert all(line.startswith(f"{tmp_path}/evil\\x1b[2J\\x0a.yaml") for line in lines)
    # A missing file is echoed the same way, and a valid spec's "ok" line too.
    assert main(["validate", str(tmp_path / "gone\x1b[31m.yaml")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"{tmp_path}/gone\\x1b[31m.yaml: (top level): no such file"
    code, _, out = _validate(tmp_path, yaml.safe_dump(BASE), capsys, name="ok\x1b[31m.yaml")
    assert code == 0 and out.startswith(f"{tmp_path}/ok\\x1b[31m.yaml: ok (") and "\x1b" not in out


def test_printable_escapes_every_character_a_terminal_acts_on() -> None:
    assert printable("plain text, ünïcode and 日本語") == "plain text, ünïcode and 日本語"
    assert printable("\x1b[31m\r\n\t\x00\x7f\x9b\u2028\u202e\U000e0001") == (
        "\\x1b[31m\\x0d\\x0a\\x09\\x00\\x7f\\x9b\\u2028\\u202e\\U000e0001"
    )


def test_a_message_quoting_something_huge_is_cut_at_the_message_limit() -> None:
    [line] = SpecError("f", [Problem(path=("a",), message="x" * 10_000)]).lines_out()
    assert line == f"f: a: {'x' * MAX_MESSAGE_CHARS}... (10000 characters)"
