"""The Slurm exporter's pure parts: states, GRES, sinfo and squeue text, and the families built from them."""

from __future__ import annotations

import pytest
from prometheus_client.registry import CollectorRegistry

from kiln.metrics.slurm import (
    SINFO_COMMAND,
    SQUEUE_COMMAND,
    JobRow,
    NodeRow,
    base_state,
    gres_count,
    job_families,
    node_families,
    parse_sinfo,
    parse_squeue,
    pending_reason,
)
from tests.support.metrics import SINFO_TEXT, SQUEUE_TEXT, families_of, labels

# Slurm's description of a job pending in two partitions whose nodes are busy (squeue %r prints it).
NODES_UNAVAILABLE = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("idle", "idle"),
        ("allocated", "allocated"),
        ("mixed", "mixed"),
        ("down*", "down"),
        ("drained*", "drained"),
        ("draining@", "draining"),
        ("idle~", "idle"),
        ("idle#", "idle"),
        ("allocated!", "allocated"),
        ("idle%", "idle"),
        ("reserved$", "reserved"),
        ("mixed^", "mixed"),
        ("mixed-", "mixed"),
        ("completing", "completing"),
        ("unknown*", "unknown"),
        ("IDLE", "idle"),
        ("allocated+", "allocated"),
        ("idle+cloud+power", "idle"),
        (" down*~ ", "down"),
        ("", "unknown"),
    ],
)
def test_base_state_strips_flags_and_lowercases(text: str, state: str) -> None:
    assert base_state(text) == state


@pytest.mark.parametrize(
    ("text", "name", "count"),
    [
        ("gpu:8", "gpu", 8),
        ("gpu:h100:8(S:0-1)", "gpu", 8),
        ("gpu:h100:3(IDX:0-2)", "gpu", 3),
        ("gpu:0", "gpu", 0),
        ("gpu:h100:0(IDX:N/A)", "gpu", 0),
        ("gpu:h100:3(IDX:0,2-3)", "gpu", 3),
        ("gpu:a100:2(S:0),gpu:v100:4(S:1)", "gpu", 6),
        ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:1,3)", "gpu", 3),
        ("gpu:h100:8(S:0-1),neuron:16", "neuron", 16),
        ("neuron:16", "gpu", 0),
        ("gpu", "gpu", 1),
        ("gpu:h100", "gpu", 1),
        ("mps:400,gpu:4", "gpu", 4),
        ("gpu:1K", "gpu", 1024),
        ("gpus:4", "gpu", 0),
        ("(null)", "gpu", 0),
        ("", "gpu", 0),
    ],
)
def test_gres_count_reads_every_form_sinfo_prints(text: str, name: str, count: int) -> None:
    assert gres_count(text, name) == count


def test_parse_sinfo_reads_nodes_partitions_states_cpus_and_gres() -> None:
    rows = parse_sinfo(SINFO_TEXT)

    assert len(rows) == 8
    assert rows[0] == NodeRow(
        node="gpu-st-p5-1",
        partition="gpu",
        state="mixed",
        cpus=192,
        cpus_allocated=96,
        gpus=8,
        gpus_allocated=3,
        neuron_devices=0,
        neuron_devices_allocated=0,
    )
    assert rows[5] == NodeRow("trn-st-trn1-1", "trn", "draining", 128, 32, 0, 0, 16, 4, "kiln-hung: rank 3 | step 41")
    assert rows[6] == NodeRow("cpu-1", "cpu", "down", 8, 0, 0, 0, 0, 0, "Not responding")
    assert [row.state for row in rows] == [
        "mixed",
        "allocated",
        "idle",
        "drained",
        "mixed",
        "draining",
        "down",
        "idle",
    ]
    assert [row.partition for row in rows if row.node == "gpu-st-p5-1"] == ["gpu", "debug"]


def test_parse_sinfo_of_no_nodes_is_empty() -> None:
    assert parse_sinfo("") == []
    assert parse_sinfo("\n\n") == []


@pytest.mark.parametrize(
    "line",
    [
        "gpu-st-p5-1 gpu mixed 96/96/0/192 gpu:8 gpu:0 none",  # a format without the separators
        "gpu-st-p5-1|gpu|mixed|96/96/0/192|gpu:8|none",  # a field missing
        "gpu-st-p5-1|gpu|mixed|96/96/192|gpu:8|gpu:0|none",  # CPUsState not A/I/O/T
        "gpu-st-p5-1|gpu|mixed|96/96/0/N|gpu:8|gpu:0|none",
        "|gpu|mixed|96/96/0/192|gpu:8|gpu:0|none",  # no node name
    ],
)
def test_parse_sinfo_refuses_a_line_it_cannot_read(line: str) -> None:
    with pytest.raises(ValueError, match="sinfo line 2"):
        parse_sinfo("cpu-2|cpu|idle|0/8/0/8|(null)|(null)|none\n" + line + "\n")


def test_parse_squeue_reads_partition_state_and_reason() -> None:
    jobs = parse_squeue(SQUEUE_TEXT)

    assert jobs[0] == JobRow("gpu", "running", "None")
    assert jobs[1] == JobRow("gpu", "running", "None", restarts=2)
    assert jobs[4] == JobRow("gpu,debug", "pending", "Resources", restarts=1)
    assert jobs[5] == JobRow("trn", "pending", "ReqNodeNotAvail")
    assert [job.state for job in jobs] == ["running"] * 2 + ["pending"] * 4 + ["completing", "pending"]


def test_parse_squeue_of_an_empty_queue_is_empty() -> None:
    assert parse_squeue("") == []


def test_parse_squeue_keeps_a_reason_that_holds_the_separator() -> None:
    assert parse_squeue("gpu|PENDING|0|odd|reason\n") == [JobRow("gpu", "pending", "odd|reason")]


@pytest.mark.parametrize(
    "line", ["gpu PENDING 0 Resources", "gpu|PENDING|0", "gpu||0|Resources", "gpu|PENDING|x|Resources"]
)
def test_parse_squeue_refuses_a_line_it_cannot_read(line: str) -> None:
    with pytest.raises(ValueError, match="squeue line 1"):
        parse_squeue(line + "\n")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Resources", "Resources"),
        ("(Priority)", "Priority"),
        ("ReqNodeNotAvail, UnavailableNodes:gpu-st-p5-[1-4]", "ReqNodeNotAvail"),
        # What Slurm 22.05's squeue printed for a job pending in two partitions (its state description).
        (NODES_UNAVAILABLE, NODES_UNAVAILABLE),
        ("Held by admin: see gpu-st-p5-[1-4]", "Held by admin"),
        ("x" * 300, "x" * 120),
        ("a long sentence " * 20, ("a long sentence " * 20)[:120].strip()),
        ("", "None"),
    ],
)
def test_pending_reason_is_a_bounded_label(text: str, reason: str) -> None:
    assert pending_reason(text) == reason


class _Families:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> list:
        return self.families


def _exposed(families: list) -> dict:
    registry = CollectorRegistry()
    registry.register(_Families(families))
    return families_of(registry)


def test_node_families_count_each_partition_and_each_node_once() -> None:
    exposed = _exposed(node_families(parse_sinfo(SINFO_TEXT)))

    assert exposed["kiln_slurm_nodes"] == {
        labels(partition="gpu", state="mixed"): 1,
        labels(partition="gpu", state="allocated"): 1,
        labels(partition="gpu", state="idle"): 1,
        labels(partition="gpu", state="drained"): 1,
        labels(partition="debug", state="mixed"): 1,
        labels(partition="trn", state="draining"): 1,
        labels(partition="cpu", state="down"): 1,
        labels(partition="cpu", state="idle"): 1,
    }
    # gpu-st-p5-1 is in two partitions and still one node.
    assert exposed["kiln_slurm_node_state"] == {
        labels(node="gpu-st-p5-1", state="mixed"): 1,
        labels(node="gpu-st-p5-2", state="allocated"): 1,
        labels(node="gpu-st-p5-3", state="idle"): 1,
        labels(node="gpu-st-p5-4", state="drained"): 1,
        labels(node="trn-st-trn1-1", state="draining"): 1,
        labels(node="cpu-1", state="down"): 1,
        labels(node="cpu-2", state="idle"): 1,
    }
    assert exposed["kiln_slurm_node_cpus"][labels(node="gpu-st-p5-2")] == 192
    assert exposed["kiln_slurm_node_cpus_allocated"][labels(node="gpu-st-p5-1")] == 96
    assert exposed["kiln_slurm_node_gpus"] == {
        labels(node="gpu-st-p5-1"): 8,
        labels(node="gpu-st-p5-2"): 8,
        labels(node="gpu-st-p5-3"): 8,
        labels(node="gpu-st-p5-4"): 8,
        labels(node="trn-st-trn1-1"): 0,
        labels(node="cpu-1"): 0,
        labels(node="cpu-2"): 0,
    }
    assert exposed["kiln_slurm_node_gpus_allocated"][labels(node="gpu-st-p5-1")] == 3
    assert exposed["kiln_slurm_node_gpus_allocated"][labels(node="gpu-st-p5-2")] == 8
    assert exposed["kiln_slurm_node_gpus_allocated"][labels(node="gpu-st-p5-4")] == 0
    assert exposed["kiln_slurm_node_neuron_devices"][labels(node="trn-st-trn1-1")] == 16
    assert exposed["kiln_slurm_node_neuron_devices_allocated"][labels(node="trn-st-trn1-1")] == 4
    assert exposed["kiln_slurm_node_neuron_devices"][labels(node="gpu-st-p5-1")] == 0


def test_a_node_listed_twice_in_one_partition_counts_once() -> None:
    row = NodeRow("n1", "p", "idle", 8, 0, 0, 0, 0, 0)
    exposed = _exposed(node_families([row, row]))
    assert exposed["kiln_slurm_nodes"] == {labels(partition="p", state="idle"): 1}


def test_job_families_count_per_partition_state_and_pending_reason() -> None:
    exposed = _exposed(job_families(parse_squeue(SQUEUE_TEXT), ["cpu", "debug", "gpu", "trn"]))

    assert exposed["kiln_slurm_jobs"] == {
        labels(partition="gpu", state="running"): 2,
        labels(partition="gpu", state="pending"): 2,
        labels(partition="gpu,debug", state="pending"): 1,
        labels(partition="trn", state="pending"): 1,
        labels(partition="trn", state="running"): 0,
        labels(partition="debug", state="completing"): 1,
        labels(partition="debug", state="pending"): 0,
        labels(partition="debug", state="running"): 0,
        labels(partition="cpu", state="pending"): 1,
        labels(partition="cpu", state="running"): 0,
    }
    assert exposed["kiln_slurm_jobs_pending_reason"] == {
        labels(reason="Resources"): 2,
        labels(reason="Priority"): 1,
        labels(reason="ReqNodeNotAvail"): 1,
        labels(reason="Dependency"): 1,
    }


def test_an_empty_queue_shows_zero_pending_and_running_per_partition() -> None:
    exposed = _exposed(job_families(parse_squeue(""), ["gpu"]))

    assert exposed["kiln_slurm_jobs"] == {
        labels(partition="gpu", state="pending"): 0,
        labels(partition="gpu", state="running"): 0,
    }
    assert exposed["kiln_slurm_jobs_pending_reason"] == {}


def test_the_commands_ask_for_machine_readable_output() -> None:
    assert SINFO_COMMAND == (
        "sinfo",
        "--noheader",
        "--Node",
        "--all",
        "--Format=NodeList:|,PartitionName:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:|,Reason:",
    )
    assert SQUEUE_COMMAND == (
        "squeue",
        "--noheader",
        "--all",
        "--array",
        "--Format=Partition:|,State:|,RestartCnt:|,Reason:",
    )


def test_what_slurm_22_05_printed_for_a_real_cluster() -> None:
    # Captured from slurmctld/slurmd 22.05 (Debian 12): one node in a default and a hidden partition, GPU and
    # Neuron GRES, one job running, an array of three pending, one job pending in two partitions.
    sinfo = (
        "n1|gpu|mixed|1/1/0/2|gpu:h100:2,neuron:4|gpu:h100:1(IDX:0),neuron:0|none\n"
        "n1|debug|mixed|1/1/0/2|gpu:h100:2,neuron:4|gpu:h100:1(IDX:0),neuron:0|none\n"
    )
    # The RestartCnt column as 22.05 printed it on the local cluster for a job requeued once (kiln local drill), held
    # until its credential expired (BeginTime).
    squeue = (
        "debug|PENDING|0|Priority\n"
        "gpu|PENDING|0|Resources\n"
        "gpu|PENDING|0|Priority\n"
        "gpu|PENDING|0|Priority\n"
        "gpu|PENDING|0|Priority\n"
        "gpu|RUNNING|0|None\n"
        f"gpu,debug|PENDING|0|{NODES_UNAVAILABLE}\n"
        "local|PENDING|1|BeginTime\n"
    )
    nodes = parse_sinfo(sinfo)

    assert nodes == [
        NodeRow("n1", "gpu", "mixed", 2, 1, 2, 1, 4, 0),
        NodeRow("n1", "debug", "mixed", 2, 1, 2, 1, 4, 0),
    ]
    exposed = _exposed(job_families(parse_squeue(squeue), ["debug", "gpu"]))
    assert exposed["kiln_slurm_jobs"] == {
        labels(partition="debug", state="pending"): 1,
        labels(partition="debug", state="running"): 0,
        labels(partition="gpu", state="pending"): 4,
        labels(partition="gpu", state="running"): 1,
        labels(partition="gpu,debug", state="pending"): 1,
        labels(partition="local", state="pending"): 1,
    }
    assert exposed["kiln_slurm_jobs_pending_reason"] == {
        labels(reason="Priority"): 4,
        labels(reason="Resources"): 1,
        labels(reason=NODES_UNAVAILABLE): 1,
        labels(reason="BeginTime"): 1,
    }
    assert exposed["kiln_slurm_jobs_restarts"] == {
        labels(partition="debug"): 0,
        labels(partition="gpu"): 0,
        labels(partition="gpu,debug"): 0,
        labels(partition="local"): 1,
    }
