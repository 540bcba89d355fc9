"""The spec's observability section: which exporters each backend's nodes run, and what is refused."""

from __future__ import annotations

import copy

import pytest
import yaml

from kiln.node_config.exporters import LOCAL_EXPORTERS, local_exporters, node_exporters
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec, SpecError, load_spec
from kiln.spec.rules import check
from tests.support.specs import MINIMAL_SPEC


def _spec(observability: dict | None, **compute: object) -> ClusterSpec:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["compute"].update(compute)
    if observability is not None:
        data["observability"] = observability
    return ClusterSpec.model_validate(data)


def _problems(spec: ClusterSpec) -> list[str]:
    return [f"{'.'.join(map(str, problem.path))}: {problem.message}" for problem in check(spec)]


def test_without_the_section_no_node_runs_an_exporter():
    spec = _spec(None)
    assert config_from_spec(spec).exporters == ()
    assert _problems(spec) == []


def test_pcs_with_login_nodes_runs_every_exporter_where_it_belongs():
    spec = _spec({}, login_nodes={"count": 1})
    config = config_from_spec(spec)
    assert config.exporters == ("node", "slurm", "dcgm", "efa")
    assert config.software.node_exporter == "1.9.1" and config.software.dcgm == ("4.6.0", "4.8.3")


def test_pcs_without_login_nodes_has_nowhere_to_run_the_slurm_exporter():
    no_login = {"login_nodes": {"count": 0}}
    assert config_from_spec(_spec({}, **no_login)).exporters == ("node", "dcgm", "efa")
    [problem] = _problems(_spec({"slurm_exporter": True}, **no_login))
    assert problem.startswith("observability.slurm_exporter: got true, but PCS runs the Slurm controller itself")


def test_eks_leaves_node_and_dcgm_to_helm_and_refuses_the_slurm_exporter():
    spec = _spec({}, backend="eks")
    assert config_from_spec(spec).exporters == ("efa",)
    [problem] = _problems(_spec({"slurm_exporter": True}, backend="eks"))
    assert problem == "observability.slurm_exporter: got true, but this cluster runs no Slurm (EKS): leave it out"


def test_exporters_turned_off_stay_off_and_cpu_types_get_no_gpu_or_efa_exporter():
    off = _spec({"node_exporter": False, "dcgm_exporter": False, "efa_exporter": False, "slurm_exporter": False})
    assert config_from_spec(off).exporters == ()
    cpu = _spec({}, groups=[{"name": "cpu", "instance_type": "m5.8xlarge"}], login_nodes={"count": 1})
    assert config_from_spec(cpu).exporters == ("node", "slurm")
    assert node_exporters(cpu, "parallelcluster", ("m5.8xlarge",)) == ("node", "slurm")


def test_the_local_cluster_runs_node_and_slurm_exporters_unless_the_spec_turns_them_off():
    assert local_exporters(None) == LOCAL_EXPORTERS == ("node", "slurm")
    assert local_exporters(_spec({"slurm_exporter": False}).observability) == ("node",)
    assert local_exporters(_spec({}).observability) == ("node", "slurm")


@pytest.mark.parametrize("value", ["4.6.0", "4.6-4.8.3", "latest", "4.6.0-4.8.3-ubuntu22.04"])
def test_a_dcgm_exporter_pin_must_be_the_release_pair(tmp_path, value):
    data = copy.deepcopy(MINIMAL_SPEC)
    data["software"] = {"dcgm_exporter": value}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    [line] = caught.value.lines_out()
    assert "software.dcgm_exporter" in line and "a DCGM-exporter version pair such as 4.6.0-4.8.3" in line
