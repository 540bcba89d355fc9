"""launcher.env: one field for the launcher's environment (NCCL's, libfabric's and Neuron's variables), its older name
launcher.nccl_env, and each name refused in one line where no compute group's type would read it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from kiln.cli.main import main
from kiln.spec import parse_spec
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as _lines

GPU = {"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}
TRN = {"name": "trn", "instance_type": "trn1.32xlarge", "max_count": 2}


def _spec(groups: list[dict], **launcher: object) -> dict:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["compute"]["groups"] = copy.deepcopy(groups)
    spec["launcher"] = copy.deepcopy(launcher)
    return spec


NEURON_ENV = {
    "NEURON_RT_LOG_LEVEL": "INFO",
    "CCOM_SOCKET_IFNAME": "ens5",
    "NEURON_CC_FLAGS": "--retry_failed_compilation",
}


def test_a_neuron_cluster_sets_neuron_and_libfabric_variables() -> None:
    env = {**NEURON_ENV, "FI_LOG_LEVEL": "warn"}
    launcher = parse_spec(_spec([TRN], env=env)).launcher
    assert (launcher.environment, launcher.env_field) == (env, "env")


def test_a_gpu_cluster_keeps_ncclenv_as_the_older_name() -> None:
    env = {"NCCL_DEBUG": "INFO", "FI_EFA_USE_DEVICE_RDMA": "1"}
    launcher = parse_spec(_spec([GPU], nccl_env=env)).launcher
    assert (launcher.environment, launcher.env_field) == (env, "nccl_env")
    assert parse_spec(_spec([GPU], env=env)).launcher.environment == env


def test_a_spec_that_sets_both_names_is_one_line() -> None:
    spec = _spec([GPU], env={"NCCL_DEBUG": "INFO"}, nccl_env={"NCCL_PROTO": "simple"})
    assert _lines(spec) == [
        "x.yaml: launcher.nccl_env: is the older name of launcher.env: set one of the two (move these variables into "
        "launcher.env)"
    ]


@pytest.mark.parametrize("field", ["env", "nccl_env"])
def test_a_dumped_spec_reads_back_under_either_name(field: str) -> None:
    """A spec as kiln writes it out has both names, one of them empty: that is no spec setting both."""
    data = _spec([GPU], **{field: {"NCCL_DEBUG": "INFO"}})
    spec = parse_spec(data)
    dumped = json.loads(spec.launcher.model_dump_json())
    assert dumped["env" if field == "nccl_env" else "nccl_env"] == {}
    again = parse_spec({**data, "launcher": dumped})
    assert again.launcher.environment == spec.launcher.environment == {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize("name", ["NEURON_RT_LOG_LEVEL", "CCOM_SOCKET_IFNAME"])
@pytest.mark.parametrize("field", ["env", "nccl_env"])
def test_a_neuron_variable_without_a_neuron_group_is_refused(name: str, field: str) -> None:
    assert _lines(_spec([GPU], **{field: {name: "x"}})) == [
        f"x.yaml: launcher.{field}.{name}: is a Neuron variable (got {name!r}) and no compute group has Neuron "
        "devices: only the Neuron runtime, compiler and collectives read it; remove it"
    ]


def test_an_nccl_variable_on_a_neuron_only_cluster_is_refused() -> None:
    assert _lines(_spec([TRN], env={"NCCL_DEBUG": "INFO", "FI_LOG_LEVEL": "warn"})) == [
        "x.yaml: launcher.env.NCCL_DEBUG: is NCCL's own variable (got 'NCCL_DEBUG') and every compute group has Neuron "
        "devices, whose collectives do not use NCCL (they reach EFA through libfabric: FI_ variables apply); remove it"
    ]


def test_a_cluster_of_both_kinds_takes_both_families() -> None:
    env = {**NEURON_ENV, "NCCL_DEBUG": "INFO"}
    assert parse_spec(_spec([GPU, TRN], env=env)).launcher.environment == env


def test_a_value_outside_the_plain_characters_is_still_refused_under_env() -> None:
    [line] = _lines(_spec([TRN], env={"NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/fsx/x"}))
    assert line.startswith("x.yaml: launcher.env.NEURON_CC_FLAGS: value must be letters, digits and")


def test_validate_prints_one_line_per_refused_name(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(_spec([GPU], env={"NEURON_RT_LOG_LEVEL": "INFO", "CCOM_SOCKET_IFNAME": "eth0"})))
    assert main(["validate", "--accept-unready", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 2
    assert all("no compute group has Neuron devices" in line for line in lines)
