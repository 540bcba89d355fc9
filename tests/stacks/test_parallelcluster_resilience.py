"""spec -> ParallelCluster for the resilience section: kiln's health check as Slurm's HealthCheckProgram at the spec's
interval and ParallelCluster's GPU health check on the GPU queues, or neither (built, not synthesized)."""

from __future__ import annotations

from typing import Any

import yaml
from aws_cdk import Stack

from kiln.contracts.bundle import HEALTH_CHECK_PROGRAM
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.paths import ROOT


def _config(**resilience: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "p5-parallelcluster.yaml").read_text())
    data["resilience"] = resilience
    cluster = build_cluster(new_app(), parse_spec(data), nag=False).compute.backend.construct
    return Stack.of(cluster).resolve(cluster.config)


def test_the_spec_sets_the_health_check_program_interval_and_gpu_check() -> None:
    config = _config(health_check_interval_s=900)
    assert config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"] == [
        {"HealthCheckProgram": HEALTH_CHECK_PROGRAM},
        {"HealthCheckInterval": 900},
        {"HealthCheckNodeState": "ANY"},
    ]
    # Both queues are of GPU types (p5.48xlarge, g5.12xlarge).
    checks = {queue["Name"]: queue.get("HealthChecks") for queue in config["Scheduling"]["SlurmQueues"]}
    assert checks == {"p5": {"Gpu": {"Enabled": True}}, "debug": {"Gpu": {"Enabled": True}}}


def test_health_checks_off_sets_neither() -> None:
    config = _config(health_checks=False)
    assert "CustomSlurmSettings" not in config["Scheduling"]["SlurmSettings"]
    assert all("HealthChecks" not in queue for queue in config["Scheduling"]["SlurmQueues"])
