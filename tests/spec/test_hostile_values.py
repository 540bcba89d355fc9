"""Hostile spec values: every string that reaches a node is refused with one line naming its field.

A metacharacter corpus goes through every spec string field that ends up in a node's files (and the strict
AWS identifiers beside them): `kiln validate` exits 2 with exactly one line, which names the field, and
never a traceback. The boundary specs at each shared limit of kiln.catalog.limits build with
`build_cluster` and render, and one past each is refused with one line.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from kiln.catalog import limits
from kiln.catalog.names import known_regions
from kiln.cli.main import main
from kiln.spec import ClusterSpec, SpecError, parse_spec
from kiln.spec.models import PATTERN_RULES
from tests.support.specs import MINIMAL_SPEC

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

VALID = {
    "name": "llm",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "network": {"vpc_cidr": "10.0.0.0/16"},
    "storage": {"bucket": {"name": "kiln-data"}, "lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}},
    "compute": {
        "backend": "pcs",
        "login_nodes": {"instance_type": "m5.8xlarge"},
        "groups": [
            {
                "name": "gpu",
                "instance_type": "p5.48xlarge",
                "min_count": 2,
                "max_count": 2,
                "capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"},
            }
        ],
        "image": {"ami_id": "ami-0123456789abcdef0"},
    },
    "software": {"lock_file": "valid.lock.json", "nccl": "2.27.3-1+cuda12.9"},
    "launcher": {"checkpoint_dir": "/fsx/checkpoints", "nccl_env": {"NCCL_DEBUG": "WARN"}},
    "tags": {"team": "ml"},
}

# What a shell (or a careless reader of a file) treats specially, and text that only looks harmless.
METACHARACTERS = {
    "semicolon": ";touch /tmp/kiln-pwned",
    "command-substitution": "$(touch /tmp/kiln-pwned)",
    "backticks": "`touch /tmp/kiln-pwned`",
    "ifs": "${IFS}x",
    "dollar": "$HOME",
    "single-quote": "'",
    "double-quote": '"',
    "backslash": "\\",
    "newline-inside": "\nx",
    "trailing-newline": "\n",
    "carriage-return": "\r",
    "tab": "\t",
    "nul": "\x00",
    "escape": "\x1b[31m",
    "space": " x",
    "trailing-space": " ",
    "and-and": "&&x",
    "pipe": "|x",
    "redirect": ">x",
    "glob-star": "*",
    "glob-question": "?",
    "glob-bracket": "[x]",
    "brace": "{a,b}",
    "tilde": "~",
    "hash": "#x",
    "fullwidth-letter": "\uff41",
    "cyrillic-a": "\u0430",
    "arabic-indic-digit": "\u0663",
    "fullwidth-digit": "\uff11",
    "no-break-space": "\u00a0",
    "line-separator": "\u2028",
    "next-line": "\u0085",
    "zero-width-space": "\u200b",
}


def _set(spec: dict, path: str, value: object) -> None:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = spec
    for part in parents:
        node = node[part]
    node[last] = value


def _value(path: str, base: str) -> Callable[[str], dict]:
    def build(hostile: str) -> dict:
        spec = copy.deepcopy(VALID)
        _set(spec, path, base + hostile)
        return spec

    return build


def _key(path: str, base: str, value: str) -> Callable[[str], dict]:
    def build(hostile: str) -> dict:
        spec = copy.deepcopy(VALID)
        _set(spec, path, {base + hostile: value})
        return spec

    return build


# (id, how to put a hostile suffix into an otherwise valid spec, the field the one line must name).
FIELDS: list[tuple[str, Callable[[str], dict], str]] = [
    ("name", _value("name", "llm"), "name"),
    ("region", _value("region", "us-east-1"), "region"),
    ("availability-zone", _value("availability_zone", "us-east-1a"), "availability_zone"),
    ("checkpoint-dir", _value("launcher.checkpoint_dir", "/fsx/ck"), "launcher.checkpoint_dir"),
    ("nccl-env-key", _key("launcher.nccl_env", "NCCL_DEBUG", "WARN"), "launcher.nccl_env."),
    ("nccl-env-value", _value("launcher.nccl_env.NCCL_DEBUG", "WARN"), "launcher.nccl_env.NCCL_DEBUG"),
    *(
        (f"software-{pin}", _value(f"software.{pin}", version), f"software.{pin}")
        for pin, version in (
            ("efa_installer", "1.41.0"),
            ("nvidia_driver", "570.172.08"),
            ("slurm", "25.11"),
            ("enroot", "3.5.0"),
            ("pyxis", "0.20.0"),
            ("neuron", "2.32.0"),
            ("nvidia_container_toolkit", "1.17.8"),
            ("nccl", "2.27.3-1+cuda12.9"),
            ("node_exporter", "1.9.1"),
            ("dcgm_exporter", "4.6.0-4.8.3"),
            ("lock_file", "valid.lock.json"),
        )
    ),
    ("group-name", _value("compute.groups.0.name", "gpu"), "compute.groups[0].name"),
    ("group-instance-type", _value("compute.groups.0.instance_type", "p5.48xlarge"), "compute.groups[0].instance_type"),
    (
        "login-instance-type",
        _value("compute.login_nodes.instance_type", "m5.8xlarge"),
        "compute.login_nodes.instance_type",
    ),
    (
        "reservation-id",
        _value("compute.groups.0.capacity.reservation_id", "cr-0123456789abcdef0"),
        "compute.groups[0].capacity.reservation_id",
    ),
    ("ami-id", _value("compute.image.ami_id", "ami-0123456789abcdef0"), "compute.image.ami_id"),
    ("bucket-name", _value("storage.bucket.name", "kiln-data"), "storage.bucket.name"),
    ("vpc-cidr", _value("network.vpc_cidr", "10.0.0.0/16"), "network.vpc_cidr"),
]


def _validate(tmp_path: Path, spec: dict, capsys: pytest.CaptureFixture) -> tuple[int, list[str], str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=False))
    code = main(["validate", "--accept-unready", str(path)])
    out, err = capsys.readouterr()
    return code, err.splitlines(), out + err


def test_the_base_spec_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, lines, _ = _validate(tmp_path, VALID, capsys)
    assert code == 0, lines


@pytest.mark.parametrize(("field_id", "build", "field"), FIELDS, ids=[f[0] for f in FIELDS])
def test_every_hostile_value_is_one_line_naming_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture, field_id: str, build: Callable[[str], dict], field: str
) -> None:
    failures = []
    for name, hostile in METACHARACTERS.items():
        code, lines, everything = _validate(tmp_path, build(hostile), capsys)
        one_line = code == 2 and len(lines) == 1 and lines[0].startswith(f"{tmp_path}")
        # The line names the field and shows what was received without breaking: no raw control characters.
        if not (one_line and f": {field}" in lines[0] and lines[0].isprintable()) or "Traceback" in everything:
            failures.append((name, code, lines))
    assert failures == []


def _pattern_fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Return every (path, pattern) of a string field with a pydantic pattern, in every model below MODEL."""
    found = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        origin = typing.get_origin(annotation)
        members = typing.get_args(annotation) if origin in (typing.Union, types.UnionType, list) else ()
        for candidate in (annotation, *members):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                found += _pattern_fields(candidate, (*prefix, name))
        for meta in field.metadata:
            pattern = getattr(meta, "pattern", None)
            if pattern is not None:
                found.append(((*prefix, name), pattern))
    return found


PATTERN_FIELDS = _pattern_fields(ClusterSpec)
# A value each pattern accepts, to append hostile text to.
EXAMPLES = {
    "name": "llm",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "second_availability_zone": "us-east-1b",
    "vpc_id": "vpc-0123456789abcdef0",
    "private_subnet_id": "subnet-0123456789abcdef0",
    "ami_id": "ami-0123456789abcdef0",
    "nccl": "2.27.3-1+cuda12.9",
    "dcgm_exporter": "4.6.0-4.8.3",
    "lock_file": "cluster.lock.json",
    "kubernetes_version": "1.35",
    "file_system_id": "fs-0123456789abcdef0",
    "mount_name": "abcdefgh",
    "security_group_id": "sg-0123456789abcdef0",
    "path": "setup.sh",
    "user": "alice",
}


def test_every_pydantic_pattern_is_known_and_anchored() -> None:
    assert {pattern for _, pattern in PATTERN_FIELDS} == set(PATTERN_RULES)
    for _, pattern in PATTERN_FIELDS:
        assert pattern.startswith("^") and pattern.endswith("$"), pattern
        assert r"\d" not in pattern and r"\w" not in pattern, f"{pattern}: spell classes in ASCII"


@pytest.mark.parametrize(("path", "pattern"), PATTERN_FIELDS, ids=[".".join(p) for p, _ in PATTERN_FIELDS])
@pytest.mark.parametrize(
    "tail", ["\n", " ", "\u0663", "\uff11", "\r\n"], ids=["newline", "space", "arabic", "wide", "crlf"]
)
def test_pydantic_patterns_refuse_a_trailing_newline_and_foreign_digits(path, pattern, tail) -> None:
    """pydantic matches Field patterns with Rust's regex, where $ is the end of text: check it, do not assume."""
    leaf = path[-1]
    good = EXAMPLES.get(leaf)
    if good is None:
        good = "gpu" if path[-2:] == ("groups", "name") or leaf == "name" else "1.41.0"
    assert re.fullmatch(pattern.removeprefix("^").removesuffix("$"), good), (pattern, good)
    spec = copy.deepcopy(VALID)
    if path == ("name",):
        spec["name"] = good + tail
    elif path[0] == "compute" and path[1] == "groups":
        spec["compute"]["groups"][0][leaf] = good + tail
    elif path[:2] == ("bootstrap", "steps"):
        step = {"name": "setup", "path": "setup.sh", "phase": "install", "roles": ["compute"]}
        spec["bootstrap"] = {"steps": [{**step, leaf: good + tail}]}
    else:
        node = spec
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[leaf] = good + tail
        if leaf == "vpc_id":
            spec["network"]["private_subnet_id"] = "subnet-0123456789abcdef0"
    with pytest.raises(SpecError) as caught:
        parse_spec(spec, "x.yaml")
    fields = [line.split(": ", 2)[1] for line in caught.value.lines_out()]
    assert any(f.endswith(leaf) for f in fields), fields


@pytest.mark.parametrize(
    ("where", "mapping", "hostile_key", "words"),
    [
        ("tags", "tags", "team\n", "tags.'team\\n': tag keys may hold"),
        ("nccl", "launcher.nccl_env", "NCCL_PROTO\n", "launcher.nccl_env.'NCCL_PROTO\\n': is not a valid variable"),
    ],
)
def test_a_hostile_key_is_shown_escaped_on_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, where: str, mapping: str, hostile_key: str, words: str
) -> None:
    spec = copy.deepcopy(VALID)
    _set(spec, mapping, {hostile_key: "v"})
    code, lines, everything = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert words in lines[0]
    assert "Traceback" not in everything


def test_a_hostile_key_with_a_wrong_type_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = copy.deepcopy(VALID)
    spec["launcher"]["nccl_env"] = {"NCCL_DEBUG\nRDMAV_FORK_SAFE": 1}
    code, lines, _ = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "launcher.nccl_env.'NCCL_DEBUG\\nRDMAV_FORK_SAFE': must be a string" in lines[0]


@pytest.mark.parametrize(
    "value", ["ops\nteam", "ops\x00", "a;b", "$(x)", "a`b`", "a'b", 'a"b', "a|b", "a&b", "a*b", "a\u0085b"]
)
def test_tag_values_hold_only_what_aws_takes(tmp_path: Path, capsys: pytest.CaptureFixture, value: str) -> None:
    spec = copy.deepcopy(VALID)
    spec["tags"] = {"team": value}
    code, lines, _ = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert ": tags.team: tag values may hold letters, digits, spaces and" in lines[0]


@pytest.mark.parametrize("path", ["s3://data/x\ny", "s3://data/\x00", "s3://da\nta/x", "s3://data//x", "s3:/data"])
def test_import_path_is_one_printable_s3_uri(tmp_path: Path, capsys: pytest.CaptureFixture, path: str) -> None:
    spec = copy.deepcopy(VALID)
    spec["storage"]["lustre"]["data_repository"] = {"import_path": path}
    code, lines, _ = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert ": storage.lustre.data_repository.import_path: " in lines[0]


def test_regions_come_from_botocore_data_and_unknown_ones_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert {"us-east-1", "eu-west-1", "us-gov-west-1", "cn-north-1", "eusc-de-east-1"} <= known_regions()
    assert not any(name.endswith("-global") for name in known_regions())
    spec = copy.deepcopy(VALID)
    spec["region"], spec["availability_zone"] = "us-east-7", "us-east-7a"
    code, lines, _ = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert ": region: is not an AWS region (got 'us-east-7'); did you mean" in lines[0]


@pytest.mark.parametrize(
    ("backend", "cidr", "refused"),
    [
        ("pcs", "172.17.0.0/16", True),
        ("pcs", "172.17.64.0/18", True),
        ("parallelcluster", "172.17.0.0/20", True),
        ("hyperpod", "172.17.0.0/16", True),
        ("eks", "172.17.0.0/16", False),
        ("pcs", "172.16.0.0/16", False),
        ("pcs", "172.18.0.0/16", False),
    ],
)
def test_slurm_vpcs_stay_clear_of_dockers_default_bridge(backend: str, cidr: str, refused: bool) -> None:
    spec = copy.deepcopy(VALID)
    spec["network"] = {"vpc_cidr": cidr}
    spec["compute"]["backend"] = backend
    spec["compute"]["groups"][0]["capacity"] = {"type": "on-demand"}
    if backend == "eks":
        spec["compute"]["image"] = {"os": "al2023"}
        # Pods bring NCCL on EKS, and its nodes download nothing a lock covers: both are refused there, and so
        # are login nodes, which kiln does not boot on EKS.
        del spec["software"]["nccl"], spec["software"]["lock_file"], spec["compute"]["login_nodes"]
    if not refused:
        parse_spec(spec)
        return
    with pytest.raises(SpecError) as caught:
        parse_spec(spec, "x.yaml")
    assert caught.value.lines_out() == [
        f"x.yaml: network.vpc_cidr: overlaps Docker's default bridge 172.17.0.0/16 (got {cidr!r}): Slurm nodes "
        "run Docker, which would route those VPC addresses to its bridge; choose a range such as 10.0.0.0/16"
    ]


def test_spec_rules_and_constructs_share_the_limits() -> None:
    """The numbers live in kiln.catalog.limits only: the rules and constructs import them, no literal copies."""
    from kiln.constructs import launch_template, lustre
    from kiln.spec.rules import compute as compute_rules
    from kiln.spec.rules import storage as storage_rules

    assert lustre.PERSISTENT_2_THROUGHPUTS is limits.PERSISTENT_2_THROUGHPUTS
    assert storage_rules.PERSISTENT_2_THROUGHPUTS is limits.PERSISTENT_2_THROUGHPUTS
    assert launch_template.ROOT_VOLUME_MAX_GIB == compute_rules.ROOT_VOLUME_MAX_GIB == limits.EBS_GP3_MAX_GIB
    assert limits.MAX_SPEC_TAGS + limits.KILN_ADDED_TAGS_MAX <= limits.MAX_TAGS_PER_RESOURCE


BASE = {**MINIMAL_SPEC, "name": "edge"}


def edge(*changes: tuple[str, object], compute: dict | None = None) -> dict:
    """Return BASE with COMPUTE in place of its compute section and the dotted CHANGES applied."""
    spec = copy.deepcopy(BASE)
    if compute is not None:
        spec["compute"] = copy.deepcopy(compute)
    for path, value in changes:
        _set(spec, path, value)
    return spec


def group(**fields: object) -> dict:
    return {"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2, **fields}


def hyperpod(*groups: dict, **fields: object) -> dict:
    return {"backend": "hyperpod", "groups": list(groups), **fields}


def eks(*groups: dict) -> dict:
    return {"backend": "eks", "groups": list(groups), "image": {"os": "al2023"}}


# EKS's control plane spans two AZs: offline (no account to look them up) the spec names the second.
EKS_SECOND_AZ = ("network", {"second_availability_zone": "us-east-1b"})


def parallelcluster(*groups: dict) -> dict:
    return {"backend": "parallelcluster", "groups": list(groups)}


MAX_LUSTRE = limits.INT32_MAX // limits.LUSTRE_STORAGE_STEP_GIB * limits.LUSTRE_STORAGE_STEP_GIB
INT32 = limits.INT32_MAX
ROOT = "compute.groups.0.root_volume_gib"
WIDE_TAG_VALUE = "Équipe ML 1+1=2 @ a:b/c_d-e." * 9

# At each shared limit: a spec validate accepts, which must build and render.
AT_THE_LIMIT = {
    "root-volume-min": edge((ROOT, limits.ROOT_VOLUME_MIN_GIB)),
    "root-volume-max-pcs": edge((ROOT, limits.ROOT_VOLUME_MAX_GIB)),
    "root-volume-max-eks": edge(EKS_SECOND_AZ, compute=eks(group(root_volume_gib=limits.ROOT_VOLUME_MAX_GIB))),
    "root-volume-max-parallelcluster": edge(compute=parallelcluster(group(root_volume_gib=limits.EBS_GP3_MAX_GIB))),
    "root-volume-max-hyperpod": edge(
        compute=hyperpod(group(min_count=2, root_volume_gib=limits.HYPERPOD_VOLUME_MAX_GIB))
    ),
    "hyperpod-group-and-login-max": edge(
        compute=hyperpod(
            group(min_count=limits.HYPERPOD_MAX_INSTANCES_PER_GROUP, max_count=limits.HYPERPOD_MAX_INSTANCES_PER_GROUP),
            login_nodes={"count": limits.HYPERPOD_MAX_INSTANCES_PER_GROUP},
        )
    ),
    "pcs-nodes-max": edge(("compute.groups.0.max_count", limits.PCS_MAX_NODES - 1)),
    "parallelcluster-queues-max": edge(
        compute=parallelcluster(*(group(name=f"q{i}") for i in range(limits.PARALLELCLUSTER_MAX_QUEUES)))
    ),
    "parallelcluster-queue-name-max": edge(
        compute=parallelcluster(group(name="q" * limits.PARALLELCLUSTER_QUEUE_NAME_MAX))
    ),
    "eks-counts-int32": edge(EKS_SECOND_AZ, compute=eks(group(min_count=INT32, max_count=INT32))),
    "group-name-25": edge(("compute.groups.0.name", "g" * 25)),
    "tags-max": edge(("tags", {f"k{i}": "v" for i in range(limits.MAX_SPEC_TAGS)})),
    "tag-key-and-value-max": edge(("tags", {"k" * limits.TAG_KEY_MAX: WIDE_TAG_VALUE[: limits.TAG_VALUE_MAX]})),
    "tag-empty-value": edge(("tags", {"team": ""})),
    "lustre-max": edge(("storage.lustre.storage_gib", MAX_LUSTRE)),
    "vpc-16": edge(("network", {"vpc_cidr": "10.0.0.0/16"})),
    "vpc-22": edge(("network", {"vpc_cidr": "10.0.0.0/22"})),
    "vpc-beside-docker": edge(("network", {"vpc_cidr": "172.18.0.0/16"})),
    "eks-on-docker-range": edge(
        ("network", {"vpc_cidr": "172.17.0.0/16", "second_availability_zone": "us-east-1b"}), compute=eks(group())
    ),
    "ttl-max": edge(("ci", {"ttl_hours": limits.MAX_TTL_HOURS})),
    "ttl-min": edge(("ci", {"ttl_hours": limits.MIN_TTL_HOURS})),
    "vpc-shared-address-space": edge(("network", {"vpc_cidr": "100.64.0.0/16"})),
    "newest-partition": edge(("region", "eusc-de-east-1"), ("availability_zone", "eusc-de-east-1a")),
    "lock-file-in-a-folder": edge(("software", {"lock_file": "locks/cluster.lock.json"})),
    "hyperpod-sagemaker-names": edge(
        compute=hyperpod(
            group(instance_type="ml.p5.48xlarge", min_count=2), head_node={"instance_type": "ml.m5.8xlarge"}
        )
    ),
}

# One past each limit: refused with one line naming the field (and words of the limit).
PAST_THE_LIMIT = [
    ("root-volume-below", edge((ROOT, limits.ROOT_VOLUME_MIN_GIB - 1)), "compute.groups[0].root_volume_gib", "40"),
    ("root-volume-above", edge((ROOT, limits.ROOT_VOLUME_MAX_GIB + 1)), "compute.groups[0].root_volume_gib", "16384"),
    (
        "root-volume-10^12",
        edge(compute=hyperpod(group(min_count=2, root_volume_gib=10**12))),
        "compute.groups[0].root_volume_gib",
        "16384",
    ),
    (
        "hyperpod-group-above",
        edge(compute=hyperpod(group(min_count=6759, max_count=6759))),
        "compute.groups[0].max_count",
        "at most 6758 on hyperpod",
    ),
    (
        "hyperpod-login-above",
        edge(compute=hyperpod(group(min_count=2), login_nodes={"count": 6759})),
        "compute.login_nodes.count",
        "at most 6758",
    ),
    ("pcs-nodes-above", edge(("compute.groups.0.max_count", 2048)), "compute.groups", "at most 2048 nodes (got 2049"),
    ("pcs-group-above", edge(("compute.groups.0.max_count", 10**30)), "compute.groups[0].max_count", "at most 2048"),
    (
        "parallelcluster-queues-above",
        edge(compute=parallelcluster(*(group(name=f"q{i}") for i in range(51)))),
        "compute.groups",
        "at most 50 queues",
    ),
    (
        "parallelcluster-queue-name-above",
        edge(compute=parallelcluster(group(name="q" * 20))),
        "compute.groups[0].name",
        "at most 19 characters",
    ),
    ("eks-count-above-int32", edge(compute=eks(group(max_count=INT32 + 1))), "compute.groups[0].max_count", "at most"),
    ("group-name-26", edge(("compute.groups.0.name", "g" * 26)), "compute.groups[0].name", "up to 24"),
    (
        "group-name-trailing-dash",
        edge(compute=hyperpod(group(name="gpu-", min_count=2))),
        "compute.groups[0].name",
        "not ending in '-'",
    ),
    ("name-trailing-dash", edge(("name", "edge-")), "name", "must end in a letter or digit"),
    ("tags-above", edge(("tags", {f"k{i}": "v" for i in range(limits.MAX_SPEC_TAGS + 1)})), "tags", "at most 35"),
    ("tag-key-above", edge(("tags", {"k" * 129: "v"})), "tags.", "1-128 characters"),
    ("tag-value-above", edge(("tags", {"k": "v" * 257})), "tags.k", "at most 256"),
    ("tag-kiln-namespace", edge(("tags", {"kiln:cluster": "other"})), "tags.kiln:cluster", "kiln's own"),
    ("lustre-above", edge(("storage.lustre.storage_gib", MAX_LUSTRE + 2400)), "storage.lustre.storage_gib", "at most"),
    ("vpc-23", edge(("network", {"vpc_cidr": "10.0.0.0/23"})), "network.vpc_cidr", "/16 to /22"),
    ("vpc-15", edge(("network", {"vpc_cidr": "10.0.0.0/15"})), "network.vpc_cidr", "/16 to /22"),
    ("vpc-on-docker", edge(("network", {"vpc_cidr": "172.17.0.0/16"})), "network.vpc_cidr", "Docker"),
    ("ttl-above", edge(("ci", {"ttl_hours": limits.MAX_TTL_HOURS + 0.5})), "ci.ttl_hours", "at most 720"),
    ("ttl-below", edge(("ci", {"ttl_hours": limits.MIN_TTL_HOURS - 0.01})), "ci.ttl_hours", "at least 0.5 hours"),
    ("vpc-link-local", edge(("network", {"vpc_cidr": "169.254.0.0/16"})), "network.vpc_cidr", "must be a range"),
    ("region-unknown", edge(("region", "us-east-9"), ("availability_zone", "us-east-9a")), "region", "AWS region"),
    ("neuron-unknown", edge(("software", {"neuron": "2.99.0"})), "software.neuron", "Neuron SDK release kiln knows"),
    ("lock-file-above", edge(("software", {"lock_file": "../cluster.lock.json"})), "software.lock_file", ".json"),
    ("pcs-login-group", edge(("compute.groups.0.name", "login")), "compute.groups[0].name", "PCS login node group"),
    ("eks-system-group", edge(compute=eks(group(name="system"))), "compute.groups[0].name", "cluster services"),
    (
        "eks-arm64-gpu",
        edge(compute=eks(group(instance_type="g5g.16xlarge"))),
        "compute.groups[0].instance_type",
        "x86_64 image",
    ),
    (
        "mixed-architectures",
        edge(("compute.login_nodes", {"instance_type": "c7g.16xlarge"})),
        "compute.login_nodes.instance_type",
        "one architecture",
    ),
    (
        "import-path-double-slash",
        edge(("storage.lustre.data_repository", {"import_path": "s3://data//x"})),
        "storage.lustre.data_repository.import_path",
        "leading '/'",
    ),
    ("bucket-dot-dash", edge(("storage.bucket", {"name": "a.-b"})), "storage.bucket.name", "S3 bucket name"),
    (
        "sagemaker-name-off-hyperpod",
        edge(("compute.groups.0.instance_type", "ml.p5.48xlarge")),
        "compute.groups[0].instance_type",
        "pcs takes EC2 names",
    ),
]


@pytest.fixture(scope="module")
def render_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("edges")


@pytest.mark.parametrize("case", list(AT_THE_LIMIT))
def test_a_spec_at_a_limit_validates_builds_and_renders(
    case: str, render_root: Path, capsys: pytest.CaptureFixture
) -> None:
    from kiln.bootstrap.render import render_bundle
    from kiln.node_config.translate import config_from_spec
    from kiln.stacks.app import build_cluster, new_app

    spec_path = render_root / f"{case}.yaml"
    spec_path.write_text(yaml.safe_dump(AT_THE_LIMIT[case], sort_keys=False))
    assert main(["validate", "--accept-unready", str(spec_path)]) == 0, capsys.readouterr().err
    spec = parse_spec(AT_THE_LIMIT[case])
    stacks = build_cluster(new_app(), spec, nag=False)
    assert stacks.compute is not None
    bundle = render_bundle(config_from_spec(spec), render_root / case)
    assert (bundle.directory / bundle.entry_point).is_file()


@pytest.mark.parametrize(
    ("spec", "field", "words"), [c[1:] for c in PAST_THE_LIMIT], ids=[c[0] for c in PAST_THE_LIMIT]
)
def test_one_past_a_limit_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, spec: dict, field: str, words: str
) -> None:
    code, lines, everything = _validate(tmp_path, spec, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f": {field}" in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in everything
