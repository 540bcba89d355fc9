"""gres.conf in the bundle (where kiln writes Slurm's configuration) declares what PCS's node groups declare."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import render_bundle
from kiln.constructs.pcs import group_slurm_settings
from tests.support.bootstrap import pcs_config, pins_beside


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = pcs_config(
        image="pcs-sample",
        os="al2023",
        groups=(
            NodeGroup(name="trn", instance_type="trn1.32xlarge"),
            NodeGroup(name="gpu", instance_type="p5.48xlarge"),
        ),
        software=pins_beside("pcs-sample", "al2023"),
        lustre=False,
        exporters=(),
    )
    return render_bundle(config, tmp_path_factory.mktemp("gres") / "bundle").directory


def _records(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_a_neuron_types_gres_conf_is_the_record_pcs_gets(bundle: Path) -> None:
    (record,) = group_slurm_settings("trn1.32xlarge", "25.11").gres
    assert _records(bundle / "instances/trn1.32xlarge/gres.conf") == [
        " ".join(f"{key}={value}" for key, value in record.items())
    ]
    assert record == {"Name": "neuron", "File": "/dev/neuron[0-15]"}


def test_a_gpu_types_gres_conf_names_its_gpus(bundle: Path) -> None:
    assert _records(bundle / "instances/p5.48xlarge/gres.conf") == ["Name=gpu File=/dev/nvidia[0-7]"]
