"""The examples as synthesized: a Trainium PCS queue runs one job per node with its devices as GRES `neuron`;
GPU queues and node groups are left to PCS."""

from __future__ import annotations

import pytest

# The slow tier: the examples are synthesized once for the run (tests/conftest.py, example_assemblies).
pytestmark = pytest.mark.slow


def _pcs(assembly, stack: str) -> dict[str, dict[str, dict]]:
    """Return the PCS node groups and queues of STACK's template, by kind and PCS name."""
    resources = assembly.templates()[stack]["Resources"].values()
    found: dict[str, dict[str, dict]] = {"AWS::PCS::ComputeNodeGroup": {}, "AWS::PCS::Queue": {}}
    for resource in resources:
        if resource["Type"] in found:
            found[resource["Type"]][resource["Properties"]["Name"]] = resource["Properties"]
    return found


def test_the_trainium_pcs_example_declares_gres_and_gives_jobs_whole_nodes(example_assemblies) -> None:
    pcs = _pcs(example_assemblies["trn1-pcs"], "trn-pcs-compute")
    (trn1,) = (group for name, group in pcs["AWS::PCS::ComputeNodeGroup"].items() if name.startswith("trn1-"))
    assert trn1["SlurmConfiguration"] == {
        "GresCustomSettings": [{"Name": "neuron", "File": "/dev/neuron[0-15]"}],
        "SlurmCustomSettings": [{"ParameterName": "Gres", "ParameterValue": "neuron:16"}],
    }
    assert pcs["AWS::PCS::Queue"]["trn1"]["SlurmConfiguration"] == {
        "SlurmCustomSettings": [{"ParameterName": "OverSubscribe", "ParameterValue": "EXCLUSIVE"}]
    }


def test_the_gpu_pcs_example_is_left_to_pcs(example_assemblies) -> None:
    pcs = _pcs(example_assemblies["p5-pcs"], "llm-pcs-compute")
    assert pcs["AWS::PCS::Queue"] and pcs["AWS::PCS::ComputeNodeGroup"]
    for kind in pcs.values():
        assert all("SlurmConfiguration" not in properties for properties in kind.values())
