"""The drain hand-off: a job's watchdog, which may not drain its node as the job's user, asks; root's side drains only
for a job of the asker's that runs on the node, and removes every request it reads. A fake scontrol backed by files
answers as Slurm does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kiln.launcher import drain_request
from kiln.launcher.cli import main
from kiln.launcher.drain_request import (
    HUNG_PREFIX,
    MAX_REQUEST_BYTES,
    REQUEST_DIR_MODE,
    ask,
    request_dir,
    result_dir,
    take,
)
from tests.support.fake_slurm_state import fake_slurm, job_record

LINE = "rank 3 on node2 has not reached step 41 for 300 s (process stopped)"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A node root with the request directory configure_health makes."""
    node = tmp_path / "root"
    directory = request_dir(node)
    directory.mkdir(parents=True)
    directory.chmod(REQUEST_DIR_MODE)
    return node


def leave(root: Path, name: str = "42-node2-drain-1.json", owner: int = 1001, **fields) -> Path:
    """Write a request as the job side does, owned by OWNER."""
    body = {"format": 1, "job_id": "42", "node": "node2", "action": "drain", "reason": LINE, **fields}
    path = request_dir(root) / name
    path.write_text(json.dumps(body))
    os.chown(path, owner, owner)
    return path


def test_the_root_side_drains_for_the_askers_running_job_and_removes_the_request(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    leave(root)
    [line] = take(root, ["node2"], slurm.environ)
    reason = f"{HUNG_PREFIX}job 42 (uid 1001): {LINE}"
    assert line == f"42-node2-drain-1.json: drained node2: {reason}"
    assert slurm.node("node2") == {"state": "MIXED+DRAIN", "reason": reason}
    assert list(request_dir(root).iterdir()) == []
    # The asker's answer, in a directory only root writes.
    answer = result_dir(root) / "42-node2-drain-1.json"
    assert json.loads(answer.read_text()) == {"ok": True, "detail": f"drained node2: {reason}"}
    assert result_dir(root).stat().st_mode & 0o7777 == 0o755


def test_ask_waits_for_the_root_side_and_reads_the_reason_back(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    # The path unit runs root's side once the file is there: here, at the asker's first wait.
    outcome = ask(root, "node2", "42", LINE, sleep=lambda _: take(root, ["node2"], slurm.environ))
    assert outcome.ok, outcome.detail
    assert outcome.detail == f"the node's hand-off: drained node2: {HUNG_PREFIX}job 42 (uid 1001): {LINE}"


def test_a_job_without_scontrol_has_its_own_job_requeued_and_only_a_requeueable_one(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    done = ask(root, "node2", "42", LINE, action="requeue", sleep=lambda _: take(root, ["node2"], slurm.environ))
    assert (done.ok, done.detail) == (True, "the node's hand-off: requeued job 42")
    assert slurm.calls()[-1] == ["requeue", "42"]
    slurm.write({**slurm.read(), "jobs": {"42": job_record("42").replace("Requeue=1", "Requeue=0")}})
    refused = ask(root, "node2", "42", LINE, action="requeue", sleep=lambda _: take(root, ["node2"], slurm.environ))
    assert not refused.ok
    assert refused.detail.endswith("refused: Slurm may not requeue job 42 (a batch job with Requeue=1 only)")


def test_ask_says_in_one_line_when_nobody_takes_the_request_or_there_is_no_hand_off(tmp_path, root):
    ticks = iter(range(100))
    outcome = ask(root, "node2", "42", LINE, answer_s=3, clock=lambda: next(ticks), sleep=lambda _: None)
    assert not outcome.ok
    assert outcome.detail.startswith("the node's hand-off did not take 42-node2-drain-")
    assert outcome.detail.endswith(" within 3 s")
    missing = ask(tmp_path / "elsewhere", "node2", "42", LINE)
    assert missing.detail == f"no drain hand-off on this node ({request_dir(tmp_path / 'elsewhere')} is missing)"


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (job_record("42", user="mallory(1002)"), "uid 1001 asked for job 42, which runs as uid 1002"),
        (job_record("42", state="PENDING"), "job 42 is PENDING, not running"),
        (job_record("42", nodes="node1"), "job 42 does not run on node2"),
        (None, "Slurm knows no job 42"),
    ],
    ids=["another-users-job", "not-running", "another-node", "no-such-job"],
)
def test_a_request_for_a_job_the_asker_does_not_run_on_the_node_is_refused(tmp_path, root, job, expected):
    slurm = fake_slurm(tmp_path, jobs={"42": job} if job else {}, hostnames={"node[1-2]": ["node1", "node2"]})
    leave(root)
    [line] = take(root, ["node2"], slurm.environ)
    assert line == f"42-node2-drain-1.json: refused: {expected}"
    assert slurm.node("node2") == {"state": "MIXED"}
    assert list(request_dir(root).iterdir()) == []


def test_requests_that_are_not_plain_small_json_files_are_refused_and_removed(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root's")
    (request_dir(root) / "a-link.json").symlink_to(secret)
    # A hard link to a file outside: to another user's (protected_hardlinks aside), it reads as that user's.
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"format": 1, "job_id": "42", "node": "node2", "reason": LINE}))
    os.link(outside, request_dir(root) / "b-hard.json")
    big = leave(root, "d-big.json")
    big.write_text(json.dumps({"format": 1, "job_id": "42", "node": "node2", "reason": "x" * MAX_REQUEST_BYTES}))
    leave(root, "e-other-node.json", node="node7")
    leave(root, "f-bad-id.json", job_id="42; scontrol shutdown")
    leave(root, "f-bad-action.json", action="cancel")
    (request_dir(root) / "g-not-json.json").write_text("{")
    lines = take(root, ["node1", "node2"], slurm.environ)
    assert lines == [
        "a-link.json: refused: a symbolic link",
        "b-hard.json: refused: a file with 2 links",
        f"d-big.json: refused: larger than {MAX_REQUEST_BYTES} bytes",
        "e-other-node.json: refused: it names node 'node7', not this one (node1, node2)",
        "f-bad-action.json: refused: its action is not one of drain, requeue",
        "f-bad-id.json: refused: its job_id is not a Slurm job id",
        "g-not-json.json: refused: not JSON",
    ]
    assert list(request_dir(root).iterdir()) == []
    assert secret.read_text() == "root's" and outside.exists()
    assert all(call[0] == "show" for call in slurm.calls())


def test_a_reason_of_many_lines_becomes_one_line_behind_kilns_prefix(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    leave(root, reason="kiln-health: ok\nAction:Replace\x1b[2J" + "y" * 400)
    take(root, ["node2"], slurm.environ)
    reason = slurm.node("node2")["reason"]
    assert reason.startswith(f"{HUNG_PREFIX}job 42 (uid 1001): kiln-health: ok Action:Replace?[2Jyyy")
    assert len(reason) == 200 and "\n" not in reason


def test_the_subcommand_takes_this_nodes_requests(tmp_path, root, capsys, monkeypatch):
    slurm = fake_slurm(tmp_path)
    monkeypatch.setenv("PATH", slurm.environ["PATH"])
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    leave(root)
    assert main(["drain-requests", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kiln-launch drain-requests: 42-node2-drain-1.json: drained node2: kiln-hung")
    assert main(["--nproc-per-node", "2", "drain-requests"]) == 2
    assert "drain-requests: --nproc-per-node is a launch option" in capsys.readouterr().err


def test_the_request_directory_is_one_users_cannot_list_or_clear(root):
    assert drain_request.REQUEST_DIR_MODE == 0o1733
    assert request_dir(root).stat().st_mode & 0o7777 == 0o1733


def test_a_flood_of_requests_costs_only_its_sender(tmp_path, root):
    slurm = fake_slurm(tmp_path)
    for index in range(drain_request.MAX_PER_OWNER + 3):
        leave(root, f"flood-{index:03d}.json", owner=1002)
    leave(root, "zz-mine.json")
    lines = take(root, ["node2"], slurm.environ)
    refused = [line for line in lines if "requests from uid 1002 at once" in line]
    assert len(refused) == 3
    assert lines[-1].startswith("zz-mine.json: drained node2")
    assert list(request_dir(root).iterdir()) == []
