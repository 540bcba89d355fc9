"""Instance facts, their selection and refresh, and the NCCL/EFA presets derived from them."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import subprocess
import sys

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from kiln.catalog import (
    SoftwareVersions,
    UnknownInstanceType,
    instance_type,
    known_instance_types,
    nccl,
    preset_environment,
)
from kiln.catalog.facts import CURATED_PATH, GENERATED_PATH
from kiln.catalog.refresh import RefreshError, facts_from, refresh, render, select
from kiln.cli.main import main

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

REQUIRED = [
    "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge",
    "g5.12xlarge", "g5.48xlarge", "g6.12xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge",
    "m5.8xlarge", "m5.2xlarge", "c5.xlarge",
    "g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge", "g6e.24xlarge",
    "g6e.48xlarge",
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
    ("g6.12xlarge", "L4", 4, 1, 1, None),
    ("g6e.48xlarge", "L40S", 8, 4, 4, None),
    ("trn1.32xlarge", "Trainium", 16, 8, 8, None),
    ("trn1n.32xlarge", "Trainium", 16, 16, 16, None),
    ("trn2.48xlarge", "Trainium2", 16, 16, 16, None),
]

# (type, vCPUs, memory GiB, network performance) from AWS's instance type pages.
SIZES = [
    ("g6.12xlarge", 48, 192, "40 Gigabit"),
    ("trn2.48xlarge", 192, 2048, "16x 200 Gigabit"),
    ("p5en.48xlarge", 192, 2048, "3200 Gigabit"),
    ("p6-b200.48xlarge", 192, 2048, "3200 Gigabit"),
]


def test_required_types_are_known() -> None:
    assert set(REQUIRED) <= set(known_instance_types())


def test_catalog_covers_accelerated_efa_and_head_node_types() -> None:
    kinds = [instance_type(name).accelerator_kind for name in known_instance_types()]
    assert len(kinds) > 400
    assert kinds.count("gpu") >= 60 and kinds.count("neuron") >= 13
    assert {"m7i.large", "c7a.48xlarge", "r6i.metal", "t3.medium", "t3a.2xlarge"} <= set(known_instance_types())


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


@pytest.mark.parametrize(("name", "vcpus", "memory_gib", "network"), SIZES, ids=[s[0] for s in SIZES])
def test_sizes_match_aws(name: str, vcpus: int, memory_gib: int, network: str) -> None:
    facts = instance_type(name)
    assert (facts.vcpus, facts.memory_mib // 1024, facts.network_performance) == (vcpus, memory_gib, network)
    assert facts.architectures == ("x86_64",)


def test_accelerator_kinds_and_counts() -> None:
    g6 = instance_type("g6.12xlarge")
    assert (g6.accelerator_kind, g6.gpu_count, g6.neuron_count, g6.accelerator.manufacturer) == ("gpu", 4, 0, "NVIDIA")
    trn2 = instance_type("trn2.48xlarge")
    assert (trn2.accelerator_kind, trn2.gpu_count, trn2.neuron_count) == ("neuron", 0, 16)
    assert instance_type("m5.8xlarge").accelerator_kind is None


# (type, physical NeuronCores per device, NeuronCore generation, default LNC, logical NeuronCores at that default),
# as DescribeInstanceTypes (CoreInfo) and the Neuron docs' Logical NeuronCore configuration page give them.
NEURON_CORES = [
    ("trn1.2xlarge", 2, 2, 1, 2),
    ("trn1.32xlarge", 2, 2, 1, 32),
    ("trn1n.32xlarge", 2, 2, 1, 32),
    ("trn2.3xlarge", 8, 3, 2, 4),
    ("trn2.48xlarge", 8, 3, 2, 64),
    ("trn2u.48xlarge", 8, 3, 2, 64),
    ("inf2.48xlarge", 2, 2, 1, 24),
    ("inf1.24xlarge", 4, 1, 1, 64),
]


@pytest.mark.parametrize(("name", "cores", "version", "lnc", "logical"), NEURON_CORES, ids=[n[0] for n in NEURON_CORES])
def test_neuron_cores_per_device_and_the_default_lnc(
    name: str, cores: int, version: int, lnc: int, logical: int
) -> None:
    facts = instance_type(name)
    assert (facts.accelerator.core_count, facts.accelerator.core_version) == (cores, version)
    assert facts.neuron_core_count == facts.neuron_count * cores
    assert (facts.lnc.default, facts.logical_neuron_cores()) == (lnc, logical)


def test_only_trainium2_and_later_group_cores() -> None:
    trn2 = instance_type("trn2.48xlarge")
    assert trn2.lnc.allowed == (1, 2)
    assert (trn2.logical_neuron_cores(1), trn2.logical_neuron_cores(2)) == (128, 64)
    trn1 = instance_type("trn1.32xlarge")
    assert trn1.lnc.allowed == (1,)
    with pytest.raises(ValueError, match=r"^LNC 2 is not supported by Trainium \(trn1.32xlarge\): 1$"):
        trn1.logical_neuron_cores(2)
    with pytest.raises(ValueError, match=r"LNC 3 is not supported by Trainium2 \(trn2.48xlarge\): 1 or 2"):
        trn2.logical_neuron_cores(3)


def test_gpu_and_cpu_types_have_no_neuroncores() -> None:
    for name in ["p5.48xlarge", "m5.8xlarge"]:
        facts = instance_type(name)
        assert (facts.neuron_core_count, facts.lnc) == (0, None), name
        with pytest.raises(ValueError, match=f"{name} has no Neuron devices"):
            facts.logical_neuron_cores()
    assert instance_type("p5.48xlarge").accelerator.core_count is None


def test_nvlink_is_derived_from_the_gpu_model_and_count() -> None:
    single = instance_type("p5.4xlarge")  # one H100: nothing to link, no NVSwitch
    assert (single.nvlink_generation, single.nvswitch, single.gpu_interconnect) == (None, False, "single")
    p3dn = instance_type("p3dn.24xlarge")  # eight V100 in a hybrid cube mesh, no NVSwitch
    assert (p3dn.nvlink_generation, p3dn.nvswitch, p3dn.gpu_interconnect) == (2, False, "nvlink")
    b300 = instance_type("p6-b300.48xlarge")
    assert (b300.nvlink_generation, b300.nvswitch, b300.gpu_interconnect) == (5, True, "nvswitch")
    assert instance_type("g6e.48xlarge").gpu_interconnect == "pcie"
    assert instance_type("trn2.48xlarge").gpu_interconnect is None


def test_device_rdma_needs_efa_and_a_capable_accelerator() -> None:
    capable = ["p4d.24xlarge", "p5.4xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "trn1.32xlarge", "trn2.48xlarge"]
    assert all(instance_type(name).efa_device_rdma for name in capable)
    # V100 and PCIe GPUs have no GPUDirect RDMA over EFA; trn1.2xlarge has no EFA; inf1 is not Trainium.
    for name in ["p3dn.24xlarge", "g6e.48xlarge", "g6.12xlarge", "trn1.2xlarge", "inf1.24xlarge", "c5n.18xlarge"]:
        assert not instance_type(name).efa_device_rdma, name


def test_fractional_gpus_count_the_one_device_the_guest_sees() -> None:
    facts = instance_type("g6f.large")
    assert (facts.gpu_count, facts.accelerator.fraction, facts.gpu_interconnect) == (1, 0.125, "single")


def test_efa_cards_skip_an_ena_only_card() -> None:
    b300 = instance_type("p6-b300.48xlarge")
    assert (b300.network_cards, b300.ena_only_cards, b300.efa_interface_count) == (17, (0,), 16)
    assert b300.efa_cards == tuple(range(1, 17))
    assert instance_type("p5en.48xlarge").efa_cards == tuple(range(16))
    assert instance_type("m5.8xlarge").efa_cards == ()


def test_trn2u_gets_the_accelerators_ec2_leaves_out() -> None:
    ec2 = json.loads(GENERATED_PATH.read_text())["instance_types"]["trn2u.48xlarge"]
    assert ec2["accelerator"] is None  # moto's copy has no NeuronInfo for it
    assert instance_type("trn2u.48xlarge").accelerator == instance_type("trn2.48xlarge").accelerator


def test_general_purpose_types_have_no_efa_or_accelerator() -> None:
    head = instance_type("m5.8xlarge")
    assert (head.accelerator, head.efa_supported, head.efa_interface_count, head.gpu_count) == (None, False, 0, 0)


def test_hyperpod_offers_what_the_sagemaker_api_lists() -> None:
    for name in ["p5.48xlarge", "p4d.24xlarge", "g5.12xlarge", "g6e.48xlarge", "trn1.32xlarge", "m5.8xlarge"]:
        assert instance_type(name).hyperpod, name
    for name in ["c5.xlarge", "t3.medium", "p6-b200.48xlarge", "trn2.48xlarge", "g6.12xlarge", "p5.4xlarge"]:
        assert instance_type(name).hyperpod, name
    # The API's ClusterInstanceType enum lists c6i/m6i (so c6i.xlarge is offered) but no c7i, m7a or trn2u.
    assert instance_type("c6i.xlarge").hyperpod
    for name in ["c7i.xlarge", "m7a.large", "trn2u.48xlarge", "g6f.large", "inf2.48xlarge"]:
        assert not instance_type(name).hyperpod, name


def test_hyperpod_names_and_unknown_types() -> None:
    assert instance_type("ml.p5.48xlarge").name == "p5.48xlarge"
    assert instance_type("p5.48xlarge").hyperpod_name == "ml.p5.48xlarge"
    with pytest.raises(UnknownInstanceType, match="did you mean 'p5.48xlarge'"):
        instance_type("p5.48xlrge")


def test_curated_data_refers_to_what_the_catalog_holds() -> None:
    curated = json.loads(CURATED_PATH.read_text())
    generated = json.loads(GENERATED_PATH.read_text())["instance_types"]
    assert set(curated["busbw_floor_gbps"]["instance_types"]) <= set(generated)
    for name, entry in curated["accelerators_ec2_omits"]["instance_types"].items():
        assert name in generated and generated[entry["same_as"]]["accelerator"]
    models = {f["accelerator"]["name"] for f in generated.values() if f["accelerator"]}
    assert models <= set(curated["accelerator_models"]["models"])
    assert all(name.startswith("ml.") for name in curated["hyperpod"]["instance_types"])
    assert "docs.aws.amazon.com" in curated["hyperpod"]["about"]


def test_busbw_floors_stay_where_they_were_and_nowhere_else() -> None:
    assert instance_type("p5.48xlarge").busbw_floor_gbps.intra_node == 360
    assert instance_type("p6-b200.48xlarge").busbw_floor_gbps.intra_node == 550
    assert instance_type("g6e.48xlarge").busbw_floor_gbps.inter_node == 30
    assert instance_type("p6-b300.48xlarge").busbw_floor_gbps is None


def test_the_data_file_names_its_source() -> None:
    document = json.loads(GENERATED_PATH.read_text())
    assert f"moto {importlib.metadata.version('moto')}" in document["source"]
    assert "not a live account" in document["source"]
    assert document["generated_by"] == "kiln catalog refresh --source moto"
    assert "kiln catalog refresh --region REGION" in document["regenerate"]
    assert "ec2:DescribeInstanceTypes" in document["regenerate"]


def test_the_data_file_has_one_line_per_instance_type() -> None:
    text = GENERATED_PATH.read_text()
    document = json.loads(text)
    assert text == render(document)
    assert len(text.splitlines()) == len(document["instance_types"]) + len(document) + 3


class TestSelection:
    @staticmethod
    def item(name: str, *, current: bool = True, gpu: bool = False, neuron: bool = False, efa: bool = False) -> dict:
        item = {
            "InstanceType": name,
            "CurrentGeneration": current,
            "VCpuInfo": {"DefaultVCpus": 8, "DefaultThreadsPerCore": 2},
            "MemoryInfo": {"SizeInMiB": 32768},
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "NetworkInfo": {
                "NetworkPerformance": "25 Gigabit",
                "MaximumNetworkInterfaces": 4,
                "MaximumNetworkCards": 1,
                "EfaSupported": efa,
                "NetworkCards": [{"NetworkCardIndex": 0, "InterfaceTypes": ["interface"] + ["efa"] * efa}],
            },
        }
        if efa:
            item["NetworkInfo"]["EfaInfo"] = {"MaximumEfaInterfaces": 1}
        if gpu:
            gpus = [{"Name": "L4", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 22888}}]
            item["GpuInfo"] = {"Gpus": gpus}
        if neuron:
            devices = [
                {
                    "Name": "Trainium2",
                    "Count": 1,
                    "MemoryInfo": {"SizeInMiB": 98304},
                    "CoreInfo": {"Count": 8, "Version": 3},
                }
            ]
            item["NeuronInfo"] = {"NeuronDevices": devices}
        return item

    def kept(self, *items: dict) -> list[str]:
        return [item["InstanceType"] for item in select(items)]

    def test_current_accelerated_or_efa_types_are_kept(self) -> None:
        items = [
            self.item("g9.xlarge", gpu=True),
            self.item("trn9.xlarge", neuron=True),
            self.item("c9gn.16xlarge", efa=True),
        ]
        assert self.kept(*items) == ["g9.xlarge", "trn9.xlarge", "c9gn.16xlarge"]

    def test_previous_generation_and_plain_cpu_types_are_dropped(self) -> None:
        items = [
            self.item("p2.xlarge", current=False, gpu=True),
            self.item("c6gn.16xlarge", current=False, efa=True),
            self.item("m7g.large"),
            self.item("x2idn.large"),
        ]
        assert self.kept(*items) == []

    def test_every_size_of_a_head_node_family_is_kept_whatever_its_generation(self) -> None:
        items = [self.item("m5.large", current=False), self.item("t3.nano"), self.item("c7i.metal-48xl")]
        assert self.kept(*items) == ["m5.large", "t3.nano", "c7i.metal-48xl"]

    def test_accelerated_g5_is_kept_although_moto_calls_it_previous_generation(self) -> None:
        items = [self.item("g5.xlarge", current=False, gpu=True), self.item("g4ad.xlarge", current=False, gpu=True)]
        assert self.kept(*items) == ["g5.xlarge"]

    def test_normalized_facts_of_a_selected_item(self) -> None:
        facts = facts_from([self.item("g9.xlarge", gpu=True, efa=True), self.item("m7g.large")])
        assert list(facts) == ["g9.xlarge"]
        g9 = facts["g9.xlarge"]
        assert g9["accelerator"] == {
            "kind": "gpu", "manufacturer": "NVIDIA", "name": "L4", "count": 1, "memory_mib": 22888,
        }  # fmt: skip
        assert (g9["efa_supported"], g9["max_efa_interfaces"], g9["efa_only_interfaces"]) == (True, 1, False)

    def test_neuron_devices_keep_their_cores_and_core_generation(self) -> None:
        trn9 = facts_from([self.item("trn9.xlarge", neuron=True)])["trn9.xlarge"]
        assert trn9["accelerator"] == {
            "kind": "neuron", "manufacturer": "AWS", "name": "Trainium2", "count": 1, "memory_mib": 98304,
            "core_count": 8, "core_version": 3,
        }  # fmt: skip


class TestRefresh:
    def test_moto_source_reproduces_the_committed_file(self, tmp_path) -> None:
        out = tmp_path / "instance_types.json"
        result = refresh(source="moto", out=out)
        assert out.read_text() == GENERATED_PATH.read_text(), "regenerate with: kiln catalog refresh --source moto"
        assert len(result.facts) == len(known_instance_types())

    def test_live_refresh_against_moto_writes_the_committed_types(self, tmp_path) -> None:
        out = tmp_path / "instance_types.json"
        with mock_aws():
            result = refresh(region="us-east-1", out=out)
        document = json.loads(out.read_text())
        assert document["instance_types"] == json.loads(GENERATED_PATH.read_text())["instance_types"]
        assert document["source"] == "ec2:DescribeInstanceTypes in us-east-1, account data"
        assert result.facts["p5.48xlarge"]["max_efa_interfaces"] == 32

    def test_types_the_region_no_longer_lists_are_reported_or_kept(self, tmp_path) -> None:
        out = tmp_path / "instance_types.json"
        committed = json.loads(GENERATED_PATH.read_text())
        extra = copy.deepcopy(committed)
        extra["instance_types"]["p9.imaginary"] = extra["instance_types"]["p5.48xlarge"]
        out.write_text(json.dumps(extra))
        with mock_aws():
            kept = refresh(region="us-east-1", out=out, keep_missing=True)
            assert "p9.imaginary" in json.loads(out.read_text())["instance_types"] and not kept.removed
            dropped = refresh(region="us-east-1", out=out)
        assert dropped.removed == ("p9.imaginary",)
        assert "no longer listed: p9.imaginary" in dropped.summary()

    def test_cli_moto_refresh(self, tmp_path, capsys) -> None:
        out = tmp_path / "catalog.json"
        assert main(["catalog", "refresh", "--source", "moto", "--out", str(out)]) == 0
        assert out.read_text() == GENERATED_PATH.read_text()
        assert "from moto" in capsys.readouterr().out

    @staticmethod
    def assert_one_line_failure(capsys, argv: list[str], expected: str, out) -> None:
        assert main(argv) != 0
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1 and captured.err.startswith("kiln catalog refresh: ")
        assert expected in captured.err
        assert "Traceback" not in captured.err
        assert not out.exists()

    def test_no_credentials_is_one_line(self, tmp_path, monkeypatch, capsys) -> None:
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                     "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                     "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"]:  # fmt: skip
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        out = tmp_path / "out.json"
        argv = ["catalog", "refresh", "--region", "us-east-1", "--out", str(out)]
        self.assert_one_line_failure(capsys, argv, "no AWS credentials: set or refresh them", out)

    @pytest.mark.parametrize(
        ("code", "expected"),
        [
            # kiln.aws.errors' wording, as every command words AWS's refusals (aws_call).
            (
                "UnauthorizedOperation",
                "ec2:DescribeInstanceTypes in us-east-1 was denied (UnauthorizedOperation): allow it for the AWS "
                "identity running kiln; AWS said: no way",
            ),
            (
                "RequestLimitExceeded",
                "ec2:DescribeInstanceTypes in us-east-1 was throttled by AWS (RequestLimitExceeded)",
            ),
            ("AuthFailure", "no AWS credentials (AWS rejected those found: AuthFailure on DescribeInstanceTypes)"),
        ],
    )
    def test_ec2_errors_are_one_line(self, code: str, expected: str, tmp_path, monkeypatch, capsys) -> None:
        client = boto3.client(
            "ec2",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",  # noqa: S106 - a stubbed client never sends it
            config=Config(retries={"total_max_attempts": 1}),
        )
        stubber = Stubber(client)
        stubber.add_client_error(
            "describe_instance_types", service_error_code=code, service_message="no\nway", http_status_code=403
        )
        stubber.activate()
        monkeypatch.setattr("kiln.catalog.refresh.ec2_client", lambda region, profile: client)
        out = tmp_path / "out.json"
        self.assert_one_line_failure(
            capsys, ["catalog", "refresh", "--region", "us-east-1", "--out", str(out)], expected, out
        )

    def test_no_moto_is_one_line(self, tmp_path, monkeypatch, capsys) -> None:
        monkeypatch.setattr("kiln.catalog.refresh.importlib.util.find_spec", lambda name: None)
        out = tmp_path / "out.json"
        argv = ["catalog", "refresh", "--source", "moto", "--out", str(out)]
        self.assert_one_line_failure(capsys, argv, "--source moto needs the moto package", out)

    def test_a_directory_is_refused(self, tmp_path, capsys) -> None:
        assert main(["catalog", "refresh", "--source", "moto", "--out", str(tmp_path)]) == 1
        assert capsys.readouterr().err == f"kiln catalog refresh: refusing {tmp_path}: it is a directory; name a file\n"

    def test_no_region_names_only_what_botocore_reads(self, tmp_path, monkeypatch, capsys) -> None:
        # Before, the line said to set AWS_REGION, which botocore does not read for the region.
        from kiln.aws.session import no_region

        for name in ("AWS_DEFAULT_REGION", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        out = tmp_path / "out.json"
        assert main(["catalog", "refresh", "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"kiln catalog refresh: {no_region(spec=False)}\n"
        assert not out.exists()

    def test_region_does_not_apply_to_moto(self, capsys) -> None:
        assert main(["catalog", "refresh", "--source", "moto", "--region", "us-east-1"]) == 2
        assert "apply to --source ec2 only" in capsys.readouterr().err

    def test_an_empty_selection_is_not_written(self, tmp_path, monkeypatch) -> None:
        monkeypatch.setattr("kiln.catalog.refresh.describe_all", lambda client: [])
        with mock_aws(), pytest.raises(RefreshError, match="described no instance type kiln keeps"):
            refresh(region="us-east-1", out=tmp_path / "out.json")
        assert not (tmp_path / "out.json").exists()

    def test_refresh_help_says_what_a_live_refresh_needs(self, capsys) -> None:
        with pytest.raises(SystemExit):
            main(["catalog", "refresh", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "AWS credentials" in text and "a region" in text and "ec2:DescribeInstanceTypes" in text
        assert "kiln catalog refresh --source moto" in text


class TestPresets:
    def test_every_type_excludes_container_and_loopback_interfaces(self) -> None:
        for name in known_instance_types():
            # NCCL's own variable: not on Neuron devices, whose collectives do not use NCCL.
            wanted = None if instance_type(name).neuron_count else "^docker,lo,veth"
            assert preset_environment(name).get("NCCL_SOCKET_IFNAME") == wanted, name

    def test_no_rule_sets_a_variable_the_types_it_matches_do_not_read(self) -> None:
        for name in known_instance_types():
            facts = instance_type(name)
            for container in (False, True):
                env = preset_environment(name, container=container, shared_cache=True)
                assert all(nccl.reaches(variable, facts) for variable in env), (name, container)

    def test_modern_software_needs_no_fi_knobs_on_p5(self) -> None:
        env = preset_environment("p5.48xlarge", versions=SoftwareVersions(aws_ofi_nccl="1.13.2", libfabric="2.1.0"))
        assert not any(k.startswith("FI_") for k in env)
        assert "NCCL_PROTO" not in env

    def test_old_aws_ofi_nccl_forces_efa_provider_and_simple_protocol(self) -> None:
        env = preset_environment(
            "p4d.24xlarge", versions=SoftwareVersions(aws_ofi_nccl="1.5.0-aws", libfabric="1.16.1")
        )
        assert env["FI_PROVIDER"] == "efa" and env["NCCL_PROTO"] == "simple" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"

    def test_old_libfabric_turns_on_device_rdma_only_where_the_hardware_has_it(self) -> None:
        old = SoftwareVersions(libfabric="1.17.0")
        rdma = ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge",
                "p5.4xlarge", "p6-b300.48xlarge"]  # fmt: skip
        for name in rdma:
            assert preset_environment(name, versions=old)["FI_EFA_USE_DEVICE_RDMA"] == "1", name
            assert "FI_EFA_USE_DEVICE_RDMA" not in preset_environment(name, versions=SoftwareVersions(libfabric="1.18"))
        for name in ["g5.48xlarge", "g6e.48xlarge", "g6.12xlarge", "p3dn.24xlarge", "inf1.24xlarge", "c5n.18xlarge"]:
            assert "FI_EFA_USE_DEVICE_RDMA" not in preset_environment(name, versions=old), name

    def test_pcie_multi_gpu_types_use_cuda_memcpy_for_shm(self) -> None:
        for name in ["g5.12xlarge", "g5.48xlarge", "g6.12xlarge", "g6.48xlarge", "g6e.12xlarge", "g6e.48xlarge",
                     "g4dn.12xlarge", "g7e.48xlarge"]:  # fmt: skip
            assert preset_environment(name)["NCCL_SHM_USE_CUDA_MEMCPY"] == "1", name
        for name in ["p5.48xlarge", "p3dn.24xlarge", "p5.4xlarge", "g6.xlarge", "trn2.48xlarge", "m5.8xlarge"]:
            assert "NCCL_SHM_USE_CUDA_MEMCPY" not in preset_environment(name), name

    def test_environments_of_the_types_kiln_shipped_before(self) -> None:
        old, new = SoftwareVersions(aws_ofi_nccl="1.5.0", libfabric="1.16.1"), SoftwareVersions(libfabric="2.1.0")
        base = {"NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
        legacy = {**base, "FI_PROVIDER": "efa", "NCCL_PROTO": "simple"}
        shm = {"NCCL_SHM_USE_CUDA_MEMCPY": "1"}
        for name in ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                     "p6-b200.48xlarge"]:  # fmt: skip
            assert preset_environment(name, versions=old) == {**legacy, "FI_EFA_USE_DEVICE_RDMA": "1"}, name
            assert preset_environment(name, versions=new) == base, name
        # Trainium: AWS's Neuron EFA settings whatever the software; no NCCL variable (Neuron does not use NCCL).
        neuron = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
        for name in ["trn1.32xlarge", "trn1n.32xlarge"]:
            assert preset_environment(name, versions=old) == neuron, name
            assert preset_environment(name, versions=new) == neuron, name
        for name in ["g5.12xlarge", "g5.48xlarge", "g6e.12xlarge", "g6e.48xlarge"]:
            assert preset_environment(name, versions=old) == {**legacy, **shm}, name
            assert preset_environment(name, versions=new) == {**base, **shm}, name
        assert preset_environment("c5n.18xlarge", versions=old) == legacy
        for name in ["c5.xlarge", "c6i.xlarge", "m5.8xlarge", "m6i.2xlarge", "t3.medium"]:
            assert preset_environment(name, versions=old, fork_enomem=True) == base, name

    def test_trainium_with_efa_rdma_gets_the_neuron_efa_environment(self) -> None:
        neuron = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
        for name in ["trn1.32xlarge", "trn1n.32xlarge", "trn2.3xlarge", "trn2.48xlarge", "trn2u.48xlarge"]:
            env = preset_environment(name)
            assert {key: env.get(key) for key in neuron} == neuron, name
            assert "NCCL_SHM_USE_CUDA_MEMCPY" not in env, name
        # No EFA (trn1.2xlarge, inf2) or no device RDMA over it (inf1): single-node or inference, nothing to set.
        for name in ["trn1.2xlarge", "inf2.48xlarge", "inf1.24xlarge", "inf1.xlarge"]:
            assert preset_environment(name) == {}, name

    def test_nccl_only_rules_skip_neuron_types_and_fork_enomem_does_not(self) -> None:
        old = SoftwareVersions(aws_ofi_nccl="1.5.0", libfabric="1.16.1")
        assert "NCCL_PROTO" not in preset_environment("trn2.48xlarge", versions=old)
        assert preset_environment("inf1.24xlarge", versions=old) == {}
        # EFA types without accelerators (c5n) keep the legacy knobs, as before.
        assert preset_environment("c5n.18xlarge", versions=old)["NCCL_PROTO"] == "simple"
        # Huge pages for EFA buffers break fork() whatever the accelerator.
        assert preset_environment("trn1.32xlarge", fork_enomem=True)["FI_EFA_USE_HUGE_PAGE"] == "0"

    def test_the_neuron_rule_names_its_source(self) -> None:
        rule = next(r for r in nccl.presets()["rules"] if r["id"] == "neuron-efa")
        assert rule["when"] == {"accelerator": "neuron", "device_rdma": True}
        assert "setup-trn1-multi-node-execution" in rule["source"] and "Amazon Linux 2" in rule["why"]

    def test_huge_pages_off_only_when_fork_fails(self) -> None:
        assert "FI_EFA_USE_HUGE_PAGE" not in preset_environment("p5.48xlarge")
        assert preset_environment("p5.48xlarge", fork_enomem=True)["FI_EFA_USE_HUGE_PAGE"] == "0"
        assert "FI_EFA_USE_HUGE_PAGE" not in preset_environment("m5.xlarge", fork_enomem=True)

    def test_overrides_win_and_rdmav_is_refused(self) -> None:
        env = preset_environment("g5.48xlarge", overrides={"NCCL_SHM_USE_CUDA_MEMCPY": "0", "NCCL_DEBUG": "INFO"})
        assert env["NCCL_SHM_USE_CUDA_MEMCPY"] == "0" and env["NCCL_DEBUG"] == "INFO"
        with pytest.raises(ValueError, match="RDMAV_FORK_SAFE"):
            preset_environment("p5.48xlarge", overrides={"RDMAV_FORK_SAFE": "1"})

    def test_presets_name_facts_not_families(self) -> None:
        assert all("families" not in rule["when"] for rule in nccl.presets()["rules"])

    def test_unknown_conditions_raise(self, monkeypatch) -> None:
        document = copy.deepcopy(nccl.presets())
        document["rules"].append({"id": "x", "why": "", "when": {"families": ["p5"]}, "env": {"X": "1"}})
        monkeypatch.setattr(nccl, "presets", lambda: document)
        with pytest.raises(ValueError, match=r"condition not understood: \['families'\]"):
            preset_environment("p5.48xlarge")

    @pytest.mark.parametrize(
        ("when", "message"),
        [
            ({"efa": False, "accelerator": "nueron"}, r"condition accelerator: \['nueron'\] not understood; allowed: "
             r"\['gpu', 'neuron', 'none'\]"),
            ({"gpu_interconnect": ["pcie", "nvlnk"]}, r"condition gpu_interconnect: \['nvlnk'\] not understood"),
        ],
    )  # fmt: skip
    def test_a_value_outside_a_conditions_choices_raises_even_when_another_condition_fails(
        self, monkeypatch, when, message
    ) -> None:
        document = copy.deepcopy(nccl.presets())
        document["rules"].append({"id": "x", "why": "", "when": when, "env": {"X": "1"}})
        monkeypatch.setattr(nccl, "presets", lambda: document)
        with pytest.raises(ValueError, match=message):
            preset_environment("p5.48xlarge")

    @pytest.mark.parametrize(
        ("want", "matching"),
        [
            ("gpu", {"p5.48xlarge"}),
            ("neuron", {"trn1.32xlarge"}),
            ("none", {"m5.8xlarge"}),
            (["gpu", "none"], {"p5.48xlarge", "m5.8xlarge"}),
        ],
    )
    def test_the_accelerator_condition_matches_the_kind(self, monkeypatch, want, matching) -> None:
        document = {
            "forbidden_prefixes": [],
            "rules": [{"id": "x", "why": "", "when": {"accelerator": want}, "env": {"X": "1"}}],
        }
        monkeypatch.setattr(nccl, "presets", lambda: document)
        names = {"p5.48xlarge", "trn1.32xlarge", "m5.8xlarge"}
        assert {name for name in names if preset_environment(name) == {"X": "1"}} == matching


def test_catalog_imports_only_the_standard_library() -> None:
    heavy = "{'aws_cdk', 'boto3', 'botocore', 'pydantic', 'yaml', 'jsii', 'moto'}"
    code = (
        "import sys, kiln.catalog, kiln.catalog.refresh; kiln.catalog.instance_type('p5.48xlarge'); "
        f"print([m for m in sys.modules if m.split('.')[0] in {heavy}])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


class TestCatalogCommands:
    def test_list_show_and_unknown(self, capsys) -> None:
        assert main(["catalog", "list"]) == 0
        listing = capsys.readouterr().out
        assert "p5.48xlarge" in listing and "8x H100" in listing and "gen 4 + NVSwitch" in listing
        assert len(listing.splitlines()) == len(known_instance_types()) + 1
        assert main(["catalog", "show", "p5en.48xlarge"]) == 0
        assert json.loads(capsys.readouterr().out)["max_efa_interfaces"] == 16
        assert main(["catalog", "show", "p5.huge"]) == 2
        assert "unknown instance type" in capsys.readouterr().err

    @staticmethod
    def listed(capsys, *flags: str) -> list[str]:
        assert main(["catalog", "list", *flags]) == 0
        return [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]

    def test_filters(self, capsys) -> None:
        neuron = self.listed(capsys, "--accelerator", "neuron")
        assert "trn2.48xlarge" in neuron and all(n.startswith(("trn", "inf")) for n in neuron)
        gpus_with_efa = self.listed(capsys, "--accelerator", "gpu", "--efa")
        assert (
            "g6.12xlarge" in gpus_with_efa and "g6.xlarge" not in gpus_with_efa and "trn1.32xlarge" not in gpus_with_efa
        )
        assert "m5.8xlarge" in self.listed(capsys, "--accelerator", "none")
        assert "m5.8xlarge" not in self.listed(capsys, "--accelerator", "any")
        assert self.listed(capsys, "--family", "p5", "--hyperpod") == ["p5.4xlarge", "p5.48xlarge"]

    def test_sizes_read_in_order(self, capsys) -> None:
        assert self.listed(capsys, "--family", "p4d", "--family", "p5")[:2] == ["p4d.24xlarge", "p5.4xlarge"]
        g6e = self.listed(capsys, "--family", "g6e")
        assert g6e[0] == "g6e.xlarge" and g6e[-1] == "g6e.48xlarge"


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"LD_PRELOAD": "/tmp/x.so"}, "'LD_PRELOAD': is not an NCCL, libfabric or Neuron variable"),
        ({"KILN_STEP": "x"}, "'KILN_STEP': is not an NCCL, libfabric or Neuron variable"),
        ({"NCCL_X": "a" * 257}, "'NCCL_X': value is 257 characters; at most 256"),
        ({f"NCCL_X{i}": "1" for i in range(65)}, r"NCCL/EFA overrides: at most 64 variables \(got 65\)"),
    ],
)
def test_preset_overrides_are_held_to_the_allowed_families_and_sizes(overrides: dict, words: str) -> None:
    """The renderer and `kiln job submit` put overrides over the presets through here: the same rule as the spec's."""
    with pytest.raises(ValueError, match=words):
        preset_environment("p5.48xlarge", overrides=overrides)


def test_the_allowed_families_are_data() -> None:
    assert nccl.allowed_prefixes() == tuple(nccl.presets()["allowed_prefixes"]) == ("NCCL_", "FI_", "NEURON_", "CCOM_")
    assert preset_environment("p5.48xlarge", overrides={"FI_EFA_FORK_SAFE": "1"})["FI_EFA_FORK_SAFE"] == "1"
