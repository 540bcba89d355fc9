"""Table of invalid specs: each gives exit 2, one line naming the field, and no traceback."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kiln.cli.main import main
from tests.support.specs import MINIMAL_SPEC, assert_refused_in_one_line

VALID = MINIMAL_SPEC


def with_change(path: str, value: object) -> dict:
    """Return VALID with the dotted PATH set to VALUE (a `-` VALUE deletes the key)."""
    spec = copy.deepcopy(VALID)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = spec
    for part in parents:
        node = node[part]
    if value == "-":
        del node[last]
    else:
        node[last] = value
    return spec


# (case id, spec, field the single error line must name, words it must contain)
CASES = [
    (
        "eks-on-ubuntu",
        with_change(
            "compute",
            {
                "backend": "eks",
                "groups": [{"name": "grp", "instance_type": "p5.48xlarge"}],
                "image": {"os": "ubuntu2204"},
            },
        ),
        "compute.image.os",
        "runs al2023 only",
    ),
    (
        "eks-in-existing-vpc",
        {
            **with_change("compute.backend", "eks"),
            "network": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"},
        },
        "network.vpc_id",
        "EKS needs control-plane subnets in two AZs",
    ),
    (
        "max-below-min",
        with_change("compute.groups.0.min_count", 4),
        "compute.groups[0].max_count",
        "must be >= min_count (got 2 < 4)",
    ),
    (
        "capacity-block-without-id",
        with_change("compute.groups.0.capacity", {"type": "capacity-block"}),
        "compute.groups[0].capacity.reservation_id",
        "is required",
    ),
    (
        "reservation-bad-id",
        with_change("compute.groups.0.capacity", {"type": "reservation", "reservation_id": "cr-123"}),
        "compute.groups[0].capacity.reservation_id",
        "cr-123",
    ),
    (
        "spot-with-id",
        with_change("compute.groups.0.capacity", {"type": "spot", "reservation_id": "cr-0123456789abcdef0"}),
        "compute.groups[0].capacity.reservation_id",
        "applies to capacity-block and reservation only",
    ),
    (
        "lustre-size",
        with_change("storage.lustre.storage_gib", 2000),
        "storage.lustre.storage_gib",
        "1200 or a multiple of 2400 for PERSISTENT_2 (got 2000)",
    ),
    (
        "lustre-throughput",
        with_change("storage.lustre.throughput_per_tib", 300),
        "storage.lustre.throughput_per_tib",
        "125, 250, 500, 1000 (got 300)",
    ),
    (
        "scratch-throughput",
        with_change("storage.lustre", {"deployment": "SCRATCH_2", "throughput_per_tib": 250}),
        "storage.lustre.throughput_per_tib",
        "PERSISTENT_2 only",
    ),
    (
        "efa-on-scratch",
        with_change("storage.lustre", {"deployment": "SCRATCH_2", "efa": True}),
        "storage.lustre.efa",
        "needs deployment PERSISTENT_2",
    ),
    (
        "az-outside-region",
        with_change("availability_zone", "us-west-2a"),
        "availability_zone",
        "must lie in region us-east-1",
    ),
    ("az-without-region", with_change("region", "-"), "availability_zone", "needs region"),
    (
        "vpc-without-subnet",
        with_change("network", {"vpc_id": "vpc-0123456789abcdef0"}),
        "network.private_subnet_id",
        "is required with vpc_id",
    ),
    (
        "orchestrator-on-pcs",
        with_change("compute.orchestrator", "slurm"),
        "compute.orchestrator",
        "applies to backend hyperpod only",
    ),
    (
        "duplicate-group",
        with_change(
            "compute.groups",
            [{"name": "aaa", "instance_type": "g5.12xlarge"}, {"name": "aaa", "instance_type": "g5.12xlarge"}],
        ),
        "compute.groups[1].name",
        "must be unique",
    ),
    ("no-groups", with_change("compute.groups", []), "compute.groups", "at least one group"),
    (
        "pcs-queue-name-too-short",
        with_change("compute.groups.0.name", "p5"),
        "compute.groups[0].name",
        "must be at least 3 characters on pcs, whose queue (Slurm partition) takes it (got 'p5')",
    ),
    (
        "unknown-instance",
        with_change("compute.groups.0.instance_type", "p5.48xlage"),
        "compute.groups[0].instance_type",
        "did you mean 'p5.48xlarge'",
    ),
    (
        "unknown-head-type",
        with_change(
            "compute",
            {
                **copy.deepcopy(VALID["compute"]),
                "backend": "parallelcluster",
                "head_node": {"instance_type": "m9.huge"},
            },
        ),
        "compute.head_node.instance_type",
        "unknown instance type 'm9.huge'",
    ),
    ("negative-ttl", with_change("ci", {"ttl_hours": -1}), "ci.ttl_hours", "must be at least 0.5 hours"),
    ("zero-storage", with_change("storage.lustre.storage_gib", 0), "storage.lustre.storage_gib", "must be positive"),
    (
        "unknown-key",
        with_change("compute.groups.0.max_cont", 3),
        "compute.groups[0].max_cont",
        "did you mean 'max_count'",
    ),
    ("unknown-top-key", {**VALID, "netwrk": {}}, "netwrk", "did you mean 'network'"),
    (
        "wrong-type",
        with_change("compute.groups.0.max_count", "many"),
        "compute.groups[0].max_count",
        "must be a whole number (got 'many')",
    ),
    (
        "bad-backend",
        with_change("compute.backend", "slurmy"),
        "compute.backend",
        "must be one of pcs, parallelcluster, hyperpod, eks",
    ),
    ("bad-name", with_change("name", "LLM_Cluster"), "name", "a lowercase letter"),
    ("missing-compute", with_change("compute", "-"), "compute", "is required"),
    (
        "placement-without-efa",
        with_change("compute.groups.0", {"name": "cpu", "instance_type": "m5.xlarge", "placement_group": True}),
        "compute.groups[0].placement_group",
        "needs an EFA instance type",
    ),
    (
        "rdmav-override",
        with_change("launcher", {"nccl_env": {"RDMAV_FORK_SAFE": "1"}}),
        "launcher.nccl_env.RDMAV_FORK_SAFE",
        "must not be set",
    ),
    (
        "relative-checkpoints",
        with_change("launcher", {"checkpoint_dir": "ckpt"}),
        "launcher.checkpoint_dir",
        "absolute path",
    ),
    (
        "hyperpod-type",
        with_change(
            "compute",
            {"backend": "hyperpod", "groups": [{"name": "grp", "instance_type": "c7i.xlarge", "min_count": 1}]},
        ),
        "compute.groups[0].instance_type",
        "HyperPod does not offer ml.c7i.xlarge",
    ),
    (
        "small-root",
        with_change("compute.groups.0.root_volume_gib", 8),
        "compute.groups[0].root_volume_gib",
        "at least 40",
    ),
    (
        "public-cidr",
        with_change("network", {"vpc_cidr": "8.8.0.0/16"}),
        "network.vpc_cidr",
        "must be a range inside 10.0.0.0/8",
    ),
    (
        "pcluster-capacity-block-dynamic",
        with_change(
            "compute",
            {
                "backend": "parallelcluster",
                "groups": [
                    {
                        "name": "g",
                        "instance_type": "p5.48xlarge",
                        "min_count": 0,
                        "max_count": 2,
                        "capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"},
                    }
                ],
            },
        ),
        "compute.groups[0].min_count",
        "must equal max_count and be above 0 for a capacity block",
    ),
    (
        "hyperpod-elastic-group",
        with_change(
            "compute",
            {
                "backend": "hyperpod",
                "groups": [{"name": "grp", "instance_type": "p5.48xlarge", "min_count": 1, "max_count": 4}],
            },
        ),
        "compute.groups[0].min_count",
        "must equal max_count on hyperpod",
    ),
    (
        "hyperpod-spot",
        with_change(
            "compute",
            {
                "backend": "hyperpod",
                "groups": [
                    {
                        "name": "g",
                        "instance_type": "p5.48xlarge",
                        "min_count": 1,
                        "max_count": 1,
                        "capacity": {"type": "spot"},
                    }
                ],
            },
        ),
        "compute.groups[0].capacity.type",
        "must be on-demand on hyperpod (got spot)",
    ),
    (
        "hyperpod-reserved-name",
        with_change(
            "compute",
            {
                "backend": "hyperpod",
                "groups": [{"name": "login", "instance_type": "p5.48xlarge", "min_count": 1, "max_count": 1}],
            },
        ),
        "compute.groups[0].name",
        "is reserved on hyperpod",
    ),
    ("aws-tag", with_change("tags", {"aws:owner": "me"}), "tags.aws:owner", "must not start with 'aws:'"),
    (
        "bake-without-parent",
        with_change("compute.image", {"bake": True}),
        "compute.image.ami_id",
        "is required with bake: the image kiln bakes on, an AMI with the PCS agent",
    ),
    (
        "bake-on-eks",
        with_change(
            "compute",
            {
                "backend": "eks",
                "groups": [{"name": "grp", "instance_type": "p5.48xlarge"}],
                "image": {"os": "al2023", "bake": True},
            },
        ),
        "compute.image.bake",
        "is not offered with EKS",
    ),
    (
        "ami-on-eks-has-no-effect",
        with_change(
            "compute",
            {
                "backend": "eks",
                "groups": [{"name": "grp", "instance_type": "p5.48xlarge"}],
                "image": {"os": "al2023", "ami_id": "ami-0123456789abcdef0"},
            },
        ),
        "compute.image.ami_id",
        "has no effect with EKS",
    ),
    (
        "bake-in-short-lived-environment",
        {
            **with_change("compute.image", {"bake": True, "ami_id": "ami-0123456789abcdef0"}),
            "ci": {"ttl_hours": 2},
        },
        "compute.image.bake",
        "is not for a short-lived environment",
    ),
]


@pytest.mark.parametrize(("spec", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture, spec: dict, field: str, words: str
) -> None:
    assert_refused_in_one_line(tmp_path, capsys, spec, field, words)


def test_the_table_has_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20
    assert len({c[0] for c in CASES}) == len(CASES)


def test_base_spec_of_the_table_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(VALID))
    # Valid, and every download its nodes make is verifiable (enroot and pyxis by their commits): "ok", exit 0.
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    verdict, *plan = out.strip().splitlines()
    assert verdict == f"{path}: ok (pcs; group gpu: up to 2x p5.48xlarge with 8 H100 GPUs each); boot-ready"
    assert err == ""
    # What keeps training going on PCS (kiln.catalog.resilience), then what the nodes adopt from the PCS sample AMI
    # and what kiln installs on them.
    resilience, *plan = plan
    assert resilience.startswith("  resilience: checks: kiln-launch health on every compute node from a systemd timer")
    assert plan == [
        "  login (m5.2xlarge): adopts pcs_agent, pcs_slurm from the AWS PCS sample AMI for Slurm 25.11; installs "
        "lustre_client, enroot 3.5.0, pyxis 0.20.0",
        "  gpu (p5.48xlarge): adopts nvidia_driver 590.48.01, efa_installer 1.47.0, pcs_agent, pcs_slurm from the AWS "
        "PCS sample AMI for Slurm 25.11; installs lustre_client, enroot 3.5.0, pyxis 0.20.0, "
        "nvidia_container_toolkit 1.17.8",
        # kiln's estimate of each node's setup at boot; the p5 group scales from zero within PCS's deadline.
        "  login (m5.2xlarge): setup at boot ~23 min by kiln's estimate (install_launcher 4, install_enroot 3, "
        "install_lustre_client 2 min)",
        "  gpu (p5.48xlarge): setup at boot ~23 min by kiln's estimate (install_launcher 4, install_enroot 3, "
        "install_lustre_client 2 min); PCS's ResumeTimeout is 30 min",
    ]


def test_a_download_without_a_digest_is_not_boot_ready_with_the_one_step_that_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "cluster.yaml"
    spec = with_change("compute.image", {"base": "own", "ami_id": "ami-0123456789abcdef0"})
    spec["compute"]["groups"][0]["min_count"] = 2
    # An EFA installer release AWS publishes no digest for.
    spec["software"] = {"efa_installer": "1.47.0"}
    path.write_text(yaml.safe_dump(spec))
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    verdict = out.strip().splitlines()[0]
    assert verdict == (
        f"{path}: valid (pcs; group gpu: up to 2x p5.48xlarge with 8 H100 GPUs each) but NOT boot-ready: "
        "1 unverifiable download"
    )
    # Its static p5 nodes install the driver and EFA at boot, past PCS's deadline: warned (kiln.bootstrap.budget).
    [tight, line] = err.strip().splitlines()
    assert tight.startswith(f"{path}: boot budget tight: gpu nodes (p5.48xlarge) take ~")
    assert line.startswith(f"{path}: not boot-ready: pcs nodes would refuse efa-installer 1.47.0 (install_efa;")
    assert line.endswith(
        f"add lock_file: {path.stem}.lock.json under software, then run `kiln bootstrap lock --spec {path}` "
        "on a machine with internet"
    )
    assert main(["validate", "--accept-unready", str(path)]) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert verdict.endswith("1 unverifiable download, accepted by --accept-unready")


BAD_FILES = [
    ("invalid-yaml", "name: [unclosed\n", ":2:1: invalid YAML: expected ',' or ']'"),
    ("empty", "", "is empty"),
    ("list-at-top", "- name: a\n", "must be a mapping of keys at the top (got a list)"),
    ("scalar-at-top", "just words\n", "must be a mapping of keys at the top (got 'just words')"),
    ("duplicate-key", "name: a\nname: b\ncompute: {backend: pcs, groups: []}\n", "duplicate key 'name'"),
    ("tabs", "name: a\n\tcompute: 1\n", ":2:1: invalid YAML: found character '\\t'"),
    ("nul", "name: a\x00b\n", ":1:8: invalid YAML: character U+0000 is not allowed"),
    ("escape", "name: ok\ncompute: \x1b\n", ":2:10: invalid YAML: character U+001B is not allowed"),
    ("binary", b"\xff\xfe\x00name", "is not UTF-8 text"),
]


@pytest.mark.parametrize(("content", "words"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_file_through_the_real_command(tmp_path: Path, content: str | bytes, words: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = subprocess.run([sys.executable, "-m", "kiln.cli", "validate", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines


def test_missing_file_and_directory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml"), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{tmp_path / 'nope.yaml'}: (top level): no such file",
        f"{tmp_path}: (top level): is a directory, not a spec file",
    ]


def test_every_problem_is_reported_at_once_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "name: many\n"
        "compute:\n"
        "  backend: pcs\n"
        "  groups:\n"
        "    - name: gpu\n"
        "      instance_type: p5.48xlarge\n"
        "      min_count: 3\n"
        "      max_count: 1\n"
        "launcher: {checkpoint_dir: relative}\n"
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{path}:8: compute.groups[0].max_count: must be >= min_count (got 1 < 3)",
        f"{path}:9: launcher.checkpoint_dir: must be an absolute path (got 'relative')",
    ]


def test_yaml_syntax_errors_read_file_line_column(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("name: x\ncompute:\n  backend: pcs\n   groups: []\n")
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{path}:4:10: invalid YAML: mapping values are not allowed here"
    ]


def test_four_independent_problems_are_four_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An unknown key and a bad choice no longer hide the cross-field rules behind them."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "name: four\n"
        "region: us-east-1\n"
        "availability_zone: us-west-2a\n"
        "compute:\n"
        "  backend: pcs\n"
        "  groups:\n"
        "    - name: gpu\n"
        "      instance_type: g5.12xlarge\n"
        "      min_count: 3\n"
        "      max_count: 1\n"
        "      capcity: {type: spot}\n"
        "storage:\n"
        "  lustre: {deployment: PERSISTENT_3}\n"
    )
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{path}:3: availability_zone: must lie in region us-east-1 (got 'us-west-2a'; allowed: us-east-1a, "
        "us-east-1b, ...)",
        f"{path}:10: compute.groups[0].max_count: must be >= min_count (got 1 < 3)",
        f"{path}:11: compute.groups[0].capcity: unknown key; did you mean 'capacity'?",
        f"{path}:13: storage.lustre.deployment: must be one of PERSISTENT_2, SCRATCH_2 (got 'PERSISTENT_3'); "
        "did you mean 'PERSISTENT_2'?",
    ]


# (case id, spec, the lines' fields in order): a rule whose verdict rests on an invalid field stays silent.
DEPENDENT_CASES = [
    (
        "bad-capacity-type-hides-its-reservation-rule",
        with_change("compute.groups.0.capacity", {"type": "spto", "reservation_id": "cr-0123456789abcdef0"}),
        ["compute.groups[0].capacity.type"],
    ),
    (
        "bad-backend-hides-orchestrator-and-hyperpod-rules",
        with_change("compute", {"backend": "hyperpd", "orchestrator": "slurm", "groups": VALID["compute"]["groups"]}),
        ["compute.backend"],
    ),
    (
        "bad-region-hides-the-az-rule",
        with_change("region", "mars-1"),
        ["region"],
    ),
    (
        "missing-compute-keeps-the-other-rules",
        {**with_change("compute", "-"), "launcher": {"checkpoint_dir": "relative"}, "netwrk": {}},
        ["compute", "launcher.checkpoint_dir", "netwrk"],
    ),
    (
        "broken-group-keeps-the-next-groups-index",
        with_change(
            "compute.groups",
            ["not a group", {"name": "bbb", "instance_type": "g5.12xlarge", "min_count": 3, "max_count": 1}],
        ),
        ["compute.groups[0]", "compute.groups[1].max_count"],
    ),
    (
        "min-count-of-wrong-type-hides-max-below-min",
        with_change("compute.groups.0.min_count", "lots"),
        ["compute.groups[0].min_count"],
    ),
    (
        "group-without-type-still-checks-its-counts",
        with_change("compute.groups.0", {"name": "grp", "min_count": 3, "max_count": 1, "root_volume_gib": 8}),
        ["compute.groups[0].instance_type", "compute.groups[0].max_count", "compute.groups[0].root_volume_gib"],
    ),
]


@pytest.mark.parametrize(("spec", "fields"), [c[1:] for c in DEPENDENT_CASES], ids=[c[0] for c in DEPENDENT_CASES])
def test_every_independent_problem_and_no_echo_of_an_invalid_field(
    tmp_path: Path, capsys: pytest.CaptureFixture, spec: dict, fields: list[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert sorted(line.split(": ", 2)[1] for line in lines) == sorted(fields), lines


def test_a_spec_whose_bootstrap_cannot_be_built_is_one_line_in_validate_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "cluster.yaml"
    # An arm64-only head node beside x86_64-only GPU nodes: no one node bundle fits both. A spec rule says so
    # with the field and its line (so `cdk synth`, which only loads the spec, refuses it too).
    compute = {**copy.deepcopy(VALID["compute"]), "backend": "parallelcluster"}
    path.write_text(yaml.safe_dump(with_change("compute", {**compute, "head_node": {"instance_type": "c7g.16xlarge"}})))
    for command in (["validate"], ["report", "--no-lint"]):
        assert main([*command, str(path)]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(str(path))]
        assert len(lines) == 1, lines
        assert ": compute.head_node.instance_type: c7g.16xlarge runs arm64 only" in lines[0]
        assert "one architecture" in lines[0]
