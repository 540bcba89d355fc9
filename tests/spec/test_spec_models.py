"""Valid specs: examples, defaults, and the committed JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from kiln.cli.main import main
from kiln.spec import SpecError, load_spec, parse_spec
from kiln.spec.schema import schema_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
BACKENDS = {"pcs", "parallelcluster", "hyperpod", "eks"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_validates(path: Path) -> None:
    spec = load_spec(path)
    assert spec.compute.backend in BACKENDS


def test_examples_cover_every_backend_and_orchestrator() -> None:
    specs = {path.stem: load_spec(path) for path in EXAMPLES}
    assert specs["quickstart"].compute.groups[0].instance_type == "g5.12xlarge"
    seen = {
        (s.compute.backend, s.effective_orchestrator)
        for s in specs.values()
        if s.compute.groups[0].instance_type == "p5.48xlarge"
    }
    assert seen == {("pcs", None), ("parallelcluster", None), ("hyperpod", "slurm"), ("hyperpod", "eks"), ("eks", None)}


def test_defaults_are_the_documented_behaviour() -> None:
    spec = parse_spec(
        {
            "name": "d",
            "compute": {
                "backend": "hyperpod",
                "groups": [{"name": "grp", "instance_type": "p5.48xlarge", "min_count": 1}],
            },
        }
    )
    assert spec.network.vpc_cidr == "10.0.0.0/16"
    assert spec.storage.bucket.retain is True
    assert spec.storage.lustre is None
    assert spec.effective_orchestrator == "slurm"
    assert spec.compute.groups[0].capacity.type == "on-demand"
    assert spec.launcher.checkpoint_dir == "/fsx/checkpoints"
    lustre = parse_spec({**json.loads(spec.model_dump_json()), "storage": {"lustre": {}}}).storage.lustre
    assert (lustre.deployment, lustre.storage_gib, lustre.effective_throughput_per_tib, lustre.compression) == (
        "PERSISTENT_2",
        1200,
        250,
        "LZ4",
    )


def test_spec_objects_are_immutable() -> None:
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"


def test_existing_vpc_needs_subnet_and_az_and_its_cidr_only_where_ssh_admits_it() -> None:
    base = {
        "name": "x",
        "region": "us-east-1",
        "compute": {"backend": "pcs", "groups": [{"name": "grp", "instance_type": "g5.12xlarge"}]},
    }
    with pytest.raises(SpecError) as caught:
        parse_spec({**base, "network": {"vpc_id": "vpc-0123456789abcdef0", "vpc_cidr": "10.1.0.0/16"}})
    fields = sorted(p.path for p in caught.value.problems)
    # With vpc_id, vpc_cidr names the existing VPC's CIDR: allowed, and checked as a private network.
    assert fields == [("availability_zone",), ("network", "private_subnet_id")]
    existing = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}
    pcluster = {**base, "availability_zone": "us-east-1d", "network": existing}
    pcluster["compute"] = {**base["compute"], "backend": "parallelcluster"}
    with pytest.raises(SpecError) as caught:
        parse_spec(pcluster)
    [problem] = caught.value.problems
    assert problem.path == ("network", "vpc_cidr") and "required with vpc_id on parallelcluster" in problem.message
    assert (
        parse_spec({**pcluster, "network": {**existing, "vpc_cidr": "10.1.0.0/24"}}).network.vpc_cidr == "10.1.0.0/24"
    )
    ok = parse_spec(
        {
            **base,
            "availability_zone": "us-east-1d",
            "network": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"},
        }
    )
    assert ok.network.vpc_id == "vpc-0123456789abcdef0"


def test_committed_schema_is_current() -> None:
    committed = (ROOT / "spec.schema.json").read_text()
    assert committed == schema_text(), "spec.schema.json is stale: run `kiln schema --out spec.schema.json`"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_satisfy_the_json_schema(path: Path) -> None:
    schema = json.loads((ROOT / "spec.schema.json").read_text())
    jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_json_schema_rejects_unknown_keys_for_editors() -> None:
    schema = json.loads((ROOT / "spec.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        jsonschema.validate({"name": "a", "compute": {"backend": "pcs", "groups": []}, "netwrk": {}}, schema)


def test_schema_command_prints_the_committed_schema(capsys: pytest.CaptureFixture) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == (ROOT / "spec.schema.json").read_text()


@pytest.mark.parametrize(
    "instance", ["g6.12xlarge", "g6e.12xlarge", "g6e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "trn2.48xlarge"]
)
@pytest.mark.parametrize("backend", ["pcs", "eks"])
def test_current_accelerated_types_validate(tmp_path: Path, capsys: pytest.CaptureFixture, instance, backend) -> None:
    spec = {"name": "t", "compute": {"backend": backend, "groups": [{"name": "grp", "instance_type": instance}]}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["validate", "--accept-unready", str(path)]) == 0
    out = capsys.readouterr().out
    group = f"({backend}; group grp: up to 1x {instance} with "
    assert out.startswith((f"{path}: valid {group}", f"{path}: ok {group}"))


def test_an_arm64_pcs_cluster_validates_without_a_head_node(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # PCS boots no head node: the bundle serves the groups and login nodes alone, all of them arm64 here.
    spec = {
        "name": "arm",
        "compute": {
            "backend": "pcs",
            "login_nodes": {"instance_type": "c7g.16xlarge", "count": 1},
            "groups": [{"name": "grp", "instance_type": "g5g.16xlarge"}],
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["validate", "--accept-unready", str(path)]) == 0, capsys.readouterr().err
