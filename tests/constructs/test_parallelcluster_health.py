"""ParallelCluster's node health checks: kiln's check as Slurm's HealthCheckProgram (CustomSlurmSettings, which
ParallelCluster's deny-list allows) and ParallelCluster's own GPU health check on the queues of GPU types."""

from __future__ import annotations

import dataclasses

import pytest

from kiln.constructs.parallelcluster import ParallelCluster
from kiln.contracts.bundle import HEALTH_CHECK_PROGRAM
from tests.support.parallelcluster import build_props
from tests.support.pcluster_schema import concrete, load_with_official_schema


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    """The resolved configuration of one cluster with the checks on (every 600 s) and of one without."""
    st, props = build_props("on-demand", None, login_count=0)
    checked = ParallelCluster(
        st, "Checked", dataclasses.replace(props, health_check_interval_s=600, gpu_health_checks=True)
    )
    plain = ParallelCluster(st, "Plain", props)
    return {"checked": st.resolve(checked.config), "plain": st.resolve(plain.config)}


def test_slurm_runs_kilns_check_on_every_node_at_the_interval(configs) -> None:
    settings = configs["checked"]["Scheduling"]["SlurmSettings"]
    assert settings["CustomSlurmSettings"] == [
        {"HealthCheckProgram": HEALTH_CHECK_PROGRAM},
        {"HealthCheckInterval": 600},
        {"HealthCheckNodeState": "ANY"},
    ]
    assert "CustomSlurmSettings" not in configs["plain"]["Scheduling"]["SlurmSettings"]


def test_the_gpu_check_is_on_the_gpu_queue_only(configs) -> None:
    p5, cpu = configs["checked"]["Scheduling"]["SlurmQueues"]
    assert p5["HealthChecks"] == {"Gpu": {"Enabled": True}}
    assert "HealthChecks" not in cpu
    assert all("HealthChecks" not in queue for queue in configs["plain"]["Scheduling"]["SlurmQueues"])


def test_parallelclusters_schema_and_deny_list_take_the_settings(configs) -> None:
    from pcluster.validators.slurm_settings_validator import (
        SLURM_SETTINGS_DENY_LIST,
        CustomSlurmSettingLevel,
        CustomSlurmSettingsValidator,
    )

    loaded = load_with_official_schema(concrete(configs["checked"]), "llm-pcluster")
    assert loaded.scheduling.queues[0].health_checks.gpu.enabled is True
    custom = configs["checked"]["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"]
    deny = SLURM_SETTINGS_DENY_LIST["SlurmConf"]["Global"]
    assert CustomSlurmSettingsValidator().execute(custom, deny, CustomSlurmSettingLevel.SLURM_CONF) == []
    # The validator is no rubber stamp: a setting ParallelCluster keeps for itself is refused.
    assert CustomSlurmSettingsValidator().execute([{"Prolog": "/x"}], deny, CustomSlurmSettingLevel.SLURM_CONF)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"health_check_interval_s": 59}, "health_check_interval_s: got 59"),
        (
            {"health_check_interval_s": 300, "slurm_settings": {"CustomSlurmSettings": [{"MaxJobCount": 1}]}},
            "no CustomSlurmSettings beside health_check_interval_s",
        ),
    ],
)
def test_a_bad_interval_or_a_second_set_of_custom_settings_is_refused(changes: dict, message: str) -> None:
    _, props = build_props("on-demand", None, login_count=0)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(props, **changes)
