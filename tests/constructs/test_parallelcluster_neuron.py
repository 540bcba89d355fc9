"""ParallelCluster on Trainium: a Neuron queue gives each job whole nodes; GPU and CPU queues stay shared."""

from __future__ import annotations

import dataclasses

from aws_cdk import Stack

from kiln.catalog.platforms import service_fact
from kiln.changes.parallelcluster import UPDATE_POLICIES
from kiln.constructs.parallelcluster import ParallelCluster, SlurmQueue
from tests.support.parallelcluster import build_props
from tests.support.pcluster_schema import concrete, load_with_official_schema

SETTING = service_fact("parallelcluster", "job_exclusive_allocation").value


def test_a_neuron_queue_is_exclusive_and_the_official_schema_takes_it() -> None:
    st, base = build_props("on-demand", None, login_count=0)
    props = dataclasses.replace(
        base,
        queues=[
            SlurmQueue(name="trn1", instance_type="trn1.32xlarge", max_count=4),
            SlurmQueue(name="inf2", instance_type="inf2.48xlarge", max_count=1, placement_group=False),
            *base.queues,
        ],
    )
    cluster = ParallelCluster(st, "Cluster", props)
    queues = {q["Name"]: q for q in cluster.config["Scheduling"]["SlurmQueues"]}
    assert SETTING == "JobExclusiveAllocation"
    assert {name: queue.get(SETTING) for name, queue in queues.items()} == {
        "trn1": True,
        "inf2": True,
        "p5": None,
        "cpu": None,
    }
    loaded = load_with_official_schema(concrete(Stack.of(cluster).resolve(cluster.config)), "llm-pcluster")
    assert {q.name: bool(q.job_exclusive_allocation) for q in loaded.scheduling.queues} == {
        "trn1": True,
        "inf2": True,
        "p5": False,
        "cpu": False,
    }


def test_making_a_queue_exclusive_updates_a_running_cluster() -> None:
    assert UPDATE_POLICIES[f"Scheduling/SlurmQueues[Name]/{SETTING}"] == "SUPPORTED"


def test_the_reason_no_neuron_gres_is_declared_is_the_deny_list_alone() -> None:
    """The note's evidence is ParallelCluster's deny list for CustomSlurmSettings, checked against the installed
    release; the accelerator-manufacturer validator inspects GPU information Trainium types do not have, so it is no
    evidence and the note does not cite it."""
    from pcluster.validators.slurm_settings_validator import SLURM_SETTINGS_DENY_LIST

    note = service_fact("parallelcluster", "job_exclusive_allocation").note
    assert "oversubscribe" in SLURM_SETTINGS_DENY_LIST["Queue"]["Global"]
    assert "gres" in SLURM_SETTINGS_DENY_LIST["ComputeResource"]["Global"]
    assert "grestypes" in SLURM_SETTINGS_DENY_LIST["SlurmConf"]["Global"]
    assert "SLURM_SETTINGS_DENY_LIST" in note and "slurm_settings_validator.py" in note
    assert "Validator" not in note.replace("slurm_settings_validator", "")
