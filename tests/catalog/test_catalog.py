"""Instance facts and NCCL/EFA presets."""

from __future__ import annotations

import json
import subprocess
import sys

import boto3
import pytest
from moto import mock_aws

from kiln.catalog import SoftwareVersions, UnknownInstanceType, instance_type, known_instance_types, preset_environment
from kiln.catalog.facts import CURATED_PATH, GENERATED_PATH
from kiln.catalog.refresh import refresh
from kiln.cli import main

REQUIRED = [
    "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge",
    "g5.12xlarge", "g5.48xlarge", "g6e.12xlarge", "g6e.48xlarge", "trn1.32xlarge", "trn1n.32xlarge",
    "m5.8xlarge", "m5.2xlarge", "c5.xlarge",
]  # fmt: skip

# (type, accelerator, count, network cards, max EFA interfaces, NVLink generation) as AWS documents them.
EXPECTED = [
    ("p4d.24xlarge", "A100", 8, 4, 4, 3),
    ("p4de.24xlarge", "A100", 8, 4, 4, 3),
    ("p5.48xlarge", "H100", 8, 32, 32, 4),
    ("p5e.48xlarge", "H200", 8, 32, 32, 4),
    ("p5en.48xlarge", "H200", 8, 16, 16, 4),
    ("p6-b200.48xlarge", "B200", 8, 8, 8, 5),
    ("g5.12xlarge", "A10G", 4, 1, 1, None),
    ("g5.48xlarge", "A10G", 8, 1, 1, None),
    ("g6e.48xlarge", "L40S", 8, 4, 4, None),
    ("trn1.32xlarge", "Trainium", 16, 8, 8, None),
    ("trn1n.32xlarge", "Trainium", 16, 16, 16, None),
]


def test_required_types_are_known() -> None:
    assert set(REQUIRED) <= set(known_instance_types())


@pytest.mark.parametrize(
    ("name", "accelerator", "count", "cards", "efa", "nvlink"), EXPECTED, ids=[e[0] for e in EXPECTED]
)
def test_facts_match_aws(name: str, accelerator: str, count: int, cards: int, efa: int, nvlink: int | None) -> None:
    facts = instance_type(name)
    assert (facts.accelerator.name, facts.accelerator.count) == (accelerator, count)
    assert (facts.network_cards, facts.max_efa_interfaces, facts.efa_interface_count) == (cards, efa, efa)
    assert facts.nvlink_generation == nvlink
    assert facts.nvswitch is (nvlink is not None)
    assert facts.efa_only_interfaces


def test_general_purpose_types_have_no_efa_or_accelerator() -> None:
    head = instance_type("m5.8xlarge")
    assert (head.accelerator, head.efa_supported, head.efa_interface_count, head.gpu_count) == (None, False, 0, 0)


def test_hyperpod_names_and_unknown_types() -> None:
    assert instance_type("ml.p5.48xlarge").name == "p5.48xlarge"
    assert instance_type("p5.48xlarge").hyperpod_name == "ml.p5.48xlarge"
    with pytest.raises(UnknownInstanceType, match="did you mean 'p5.48xlarge'"):
        instance_type("p5.48xlrge")


def test_curated_and_generated_data_describe_the_same_types() -> None:
    curated = json.loads(CURATED_PATH.read_text())["instance_types"]
    generated = json.loads(GENERATED_PATH.read_text())["instance_types"]
    assert set(curated) == set(generated)


def test_refresh_with_moto_regenerates_the_committed_facts(tmp_path) -> None:
    out = tmp_path / "instance_types.json"
    with mock_aws():
        facts = refresh("us-east-1", out=out, client=boto3.client("ec2", region_name="us-east-1"))
    assert json.loads(out.read_text()) == json.loads(GENERATED_PATH.read_text())
    assert facts["p5.48xlarge"]["max_efa_interfaces"] == 32


def test_refresh_names_types_ec2_does_not_describe(tmp_path, monkeypatch) -> None:
    curated = json.loads(CURATED_PATH.read_text())
    curated["instance_types"]["p9.imaginary"] = curated["instance_types"]["p5.48xlarge"]
    fake = tmp_path / "curated.json"
    fake.write_text(json.dumps(curated))
    monkeypatch.setattr("kiln.catalog.refresh.CURATED_PATH", fake)
    with mock_aws(), pytest.raises(Exception, match="p9.imaginary"):
        refresh("us-east-1", out=tmp_path / "out.json", client=boto3.client("ec2", region_name="us-east-1"))


class TestPresets:
    def test_every_type_excludes_container_and_loopback_interfaces(self) -> None:
        for name in known_instance_types():
            assert preset_environment(name)["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"

    def test_modern_software_needs_no_fi_knobs_on_p5(self) -> None:
        env = preset_environment("p5.48xlarge", versions=SoftwareVersions(aws_ofi_nccl="1.13.2", libfabric="2.1.0"))
        assert not any(k.startswith("FI_") for k in env)
        assert "NCCL_PROTO" not in env

    def test_old_aws_ofi_nccl_forces_efa_provider_and_simple_protocol(self) -> None:
        env = preset_environment(
            "p4d.24xlarge", versions=SoftwareVersions(aws_ofi_nccl="1.5.0-aws", libfabric="1.16.1")
        )
        assert env["FI_PROVIDER"] == "efa" and env["NCCL_PROTO"] == "simple" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"

    def test_pcie_types_use_cuda_memcpy_for_shm(self) -> None:
        assert preset_environment("g5.48xlarge")["NCCL_SHM_USE_CUDA_MEMCPY"] == "1"
        assert "NCCL_SHM_USE_CUDA_MEMCPY" not in preset_environment("p5.48xlarge")

    def test_huge_pages_off_only_when_fork_fails(self) -> None:
        assert "FI_EFA_USE_HUGE_PAGE" not in preset_environment("p5.48xlarge")
        assert preset_environment("p5.48xlarge", fork_enomem=True)["FI_EFA_USE_HUGE_PAGE"] == "0"
        assert "FI_EFA_USE_HUGE_PAGE" not in preset_environment("m5.xlarge", fork_enomem=True)

    def test_overrides_win_and_rdmav_is_refused(self) -> None:
        env = preset_environment("g5.48xlarge", overrides={"NCCL_SHM_USE_CUDA_MEMCPY": "0", "NCCL_DEBUG": "INFO"})
        assert env["NCCL_SHM_USE_CUDA_MEMCPY"] == "0" and env["NCCL_DEBUG"] == "INFO"
        with pytest.raises(ValueError, match="RDMAV_FORK_SAFE"):
            preset_environment("p5.48xlarge", overrides={"RDMAV_FORK_SAFE": "1"})


def test_catalog_imports_only_the_standard_library() -> None:
    heavy = "{'aws_cdk', 'boto3', 'pydantic', 'yaml', 'jsii'}"
    code = f"import sys, kiln.catalog; print([m for m in sys.modules if m.split('.')[0] in {heavy}])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_catalog_commands(capsys) -> None:
    assert main(["catalog", "list"]) == 0
    listing = capsys.readouterr().out
    assert "p5.48xlarge" in listing and "8x H100" in listing
    assert main(["catalog", "show", "p5en.48xlarge"]) == 0
    assert json.loads(capsys.readouterr().out)["max_efa_interfaces"] == 16
    assert main(["catalog", "show", "p5.huge"]) == 2
    assert "unknown instance type" in capsys.readouterr().err
