"""The node hand-off: a job's watchdog asks, the node's root side checks and acts.

Slurm lets only root, SlurmUser or an operator drain a node (https://slurm.schedmd.com/scontrol.html, "update"
of a node's State), so on a cloud cluster the watchdog in a user's job cannot drain the node its hung rank is on; and
in a training container (kiln.launcher.container) it has no scontrol at all, so it cannot requeue its own job either.
It leaves a request instead:

- Job side (`ask`, as the job's user): write ``<root>/run/kiln/drain-requests/<job>-<node>-<action>-<pid>.json``
  with O_EXCL and O_NOFOLLOW (ACTIONS: drain the node, requeue the job), then wait up to ANSWER_S for the root side to
  take it (the file goes away) and read its answer from ``<root>/run/kiln/drain-results/<same name>``.
- Root side (`kiln-launch drain-requests`, as root: a systemd path unit of kiln's starts it as soon as the directory
  is not empty; on the local cluster the node replacer runs the same program whenever the directory holds a request)
  takes every request and acts only when all of these hold:

  - the file is a regular file with one link, at most MAX_REQUEST_BYTES, not a symlink (opened with O_NOFOLLOW);
  - it names this node (one of the local cluster's, which share a root), a job id of digits and an action;
  - Slurm says that job is RUNNING or COMPLETING on this node, and runs as the file's owner (root may ask for any
    job);
  - to requeue: Slurm may requeue the job (a batch job with Requeue=1), which its owner could do anyway.

  A drain's reason is the job's text behind kiln's own prefix and the job's id and user
  (``kiln-hung: job 42 (uid 1001): ...``), one printable line (slurm_node.clean_reason). Every request is removed
  once read, taken or refused (beyond MAX_PER_OWNER of one user's in a run, unread), so the path unit does not fire
  again for it; one line per request says what was done
  (the journal keeps it), and the same line is the answer, in a directory only root writes (answers older than
  RESULT_TTL_S are removed).

The request directory is root's, mode 1733 (sticky, writable and not listable by others): a user can add a request
and remove their own, never another's. What a user reaches through it: draining a node their own running job holds,
which the platform then replaces (ParallelCluster, HyperPod), and requeueing their own job; no other node, no other
job, nothing outside the two directories. A request left when its job has ended is refused and removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from kiln.launcher import slurm_node
from kiln.launcher.arguments import SubcommandParser
from kiln.launcher.errors import UsageError

REQUEST_DIR = "run/kiln/drain-requests"
REQUEST_DIR_MODE = 0o1733
RESULT_DIR = "run/kiln/drain-results"
RESULT_TTL_S = 3600.0
DRAIN, REQUEUE = "drain", "requeue"
ACTIONS = (DRAIN, REQUEUE)
MAX_REQUEST_BYTES = 4096
# Requests of one user taken in one run; more are refused, so that a flood costs its sender only (the watchdog of a
# job asks twice at most: a drain and a requeue).
MAX_PER_OWNER = 16
# How long the job side waits for the root side to take its request: the path unit starts at once.
ANSWER_S = 15.0
# States in which the job still holds the node (the watchdog asks before it requeues the job).
HOLDING_STATES = ("RUNNING", "COMPLETING")
HUNG_PREFIX = "kiln-hung: "
_JOB_ID = re.compile(r"^[0-9]{1,12}$")
_USER = re.compile(r"^.*\((\d+)\)$")


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request, as the root side read it."""

    path: Path
    owner: int
    job_id: str
    node: str
    action: str
    reason: str


class Refused(Exception):
    """A request the root side does not act on, with one line saying why."""


def request_dir(root: Path | str) -> Path:
    """Return the hand-off directory under the node's ROOT."""
    return Path(root) / REQUEST_DIR


def result_dir(root: Path | str) -> Path:
    """Return where root's side leaves its answers (root's, 0755)."""
    return Path(root) / RESULT_DIR


def ask(
    root: Path | str,
    node: str,
    job_id: str,
    reason: str,
    *,
    action: str = DRAIN,
    answer_s: float = ANSWER_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> slurm_node.Outcome:
    """Ask the node's root side to ACTION (drain NODE with REASON, or requeue JOB_ID); return its answer."""
    directory = request_dir(root)
    if not directory.is_dir():
        return slurm_node.Outcome(ok=False, detail=f"no drain hand-off on this node ({directory} is missing)")
    body = {"format": 1, "job_id": job_id, "node": node, "action": action, "reason": reason, "at": time.time()}
    name = f"{job_id}-{node}-{action}-{os.getpid()}.json"
    path = directory / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(body))
    except OSError as exc:
        return slurm_node.Outcome(ok=False, detail=f"could not leave a request in {directory}: {exc.strerror}")
    deadline = clock() + answer_s
    while path.exists() and clock() < deadline:
        sleep(0.2)
    if path.exists():
        return slurm_node.Outcome(ok=False, detail=f"the node's hand-off did not take {name} within {answer_s:.0f} s")
    try:
        answer = json.loads((result_dir(root) / name).read_text())
        ok, said = bool(answer["ok"]), str(answer["detail"])
    except (OSError, ValueError, KeyError, TypeError):
        return slurm_node.Outcome(ok=False, detail=f"the node's hand-off took {name} and left no answer")
    return slurm_node.Outcome(ok=ok, detail=f"the node's hand-off: {said}")


def read(path: Path) -> Request:
    """Read the request at PATH without following a link; raise Refused with the reason it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise Refused("a symbolic link" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_nlink != 1:
            raise Refused(f"a file with {info.st_nlink} links")
        if info.st_size > MAX_REQUEST_BYTES:
            raise Refused(f"larger than {MAX_REQUEST_BYTES} bytes")
        text = handle.read(MAX_REQUEST_BYTES + 1)
    try:
        data = json.loads(text)
    except ValueError:
        raise Refused("not JSON") from None
    if not isinstance(data, dict) or data.get("format") != 1:
        raise Refused("not a kiln drain request (format 1)")
    job_id, node, reason = data.get("job_id"), data.get("node"), data.get("reason")
    action = data.get("action", DRAIN)
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise Refused("its job_id is not a Slurm job id")
    if action not in ACTIONS:
        raise Refused(f"its action is not one of {', '.join(ACTIONS)}")
    if not isinstance(node, str) or not isinstance(reason, str) or not reason.strip():
        raise Refused("it names no node or gives no reason")
    return Request(path=path, owner=info.st_uid, job_id=job_id, node=node, action=action, reason=reason)


def job_holds(request: Request, node: str, environ: Mapping[str, str]) -> str:
    """Return the job's user id when REQUEST's job runs on NODE as the request's owner; raise Refused otherwise."""
    fields = slurm_node.job_fields(request.job_id, environ)
    if fields is None:
        raise Refused(f"Slurm knows no job {request.job_id}")
    state = fields.get("JobState", "")
    if state not in HOLDING_STATES:
        raise Refused(f"job {request.job_id} is {state or 'in no state'}, not running")
    user = _USER.match(fields.get("UserId", ""))
    if user is None:
        raise Refused(f"Slurm gives no user id for job {request.job_id}")
    uid = int(user.group(1))
    if request.owner not in (0, uid):
        raise Refused(f"uid {request.owner} asked for job {request.job_id}, which runs as uid {uid}")
    nodes = slurm_node.hostnames(fields.get("NodeList", ""), environ)
    if node not in nodes:
        raise Refused(f"job {request.job_id} does not run on {node}")
    return str(uid)


def take(root: Path | str, nodes: Collection[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """Act on every request under ROOT (as root) for one of NODES: this node on a cloud cluster, each node of a
    local cluster, whose nodes share one root; return one line per request, answer each and remove it."""
    directory = request_dir(root)
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except FileNotFoundError:
        return []
    answers = result_dir(root)
    if names:
        answers.mkdir(mode=0o755, parents=True, exist_ok=True)
        _prune(answers)
    lines = []
    per_owner: Counter[int | None] = Counter()
    for name in names:
        path = directory / name
        owner = _owner(path)
        per_owner[owner] += 1
        if per_owner[owner] > MAX_PER_OWNER:
            ok, said = False, f"refused: more than {MAX_PER_OWNER} requests from uid {owner} at once"
        else:
            ok, said = _take_one(path, nodes, environ)
        lines.append(f"{name}: {said}")
        path.unlink(missing_ok=True)
        _answer(answers / name, ok, said)
    return lines


def _take_one(path: Path, nodes: Collection[str], environ: Mapping[str, str]) -> tuple[bool, str]:
    try:
        request = read(path)
        if request.node not in nodes:
            raise Refused(f"it names node {request.node!r}, not this one ({', '.join(nodes)})")
        uid = job_holds(request, request.node, environ)
        if request.action == REQUEUE and not slurm_node.requeue_allowed(request.job_id, environ):
            raise Refused(f"Slurm may not requeue job {request.job_id} (a batch job with Requeue=1 only)")
    except Refused as refused:
        return False, f"refused: {refused}"
    if request.action == REQUEUE:
        done = slurm_node.requeue(request.job_id, environ)
        return done.ok, f"requeued job {request.job_id}" if done.ok else f"failed: {done.detail}"
    reason = slurm_node.clean_reason(f"{HUNG_PREFIX}job {request.job_id} (uid {uid}): {request.reason}")
    done = slurm_node.drain(request.node, reason, environ)
    return done.ok, f"drained {request.node}: {reason}" if done.ok else f"failed: {done.detail}"


def _owner(path: Path) -> int | None:
    """Return the uid owning PATH itself (a link's, not its target's); None when it is gone."""
    try:
        return path.lstat().st_uid
    except OSError:
        return None


def _answer(path: Path, ok: bool, said: str) -> None:
    """Leave the answer for the asker (root's directory: no link of a user's can be in the way)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps({"ok": ok, "detail": said}))
    except OSError:
        pass


def _prune(answers: Path, now: float | None = None) -> None:
    """Remove answers older than RESULT_TTL_S (their askers have long stopped waiting)."""
    limit = (time.time() if now is None else now) - RESULT_TTL_S
    for entry in os.scandir(answers):
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime < limit:
                os.unlink(entry.path)


def run(argv: list[str]) -> int:
    """`kiln-launch drain-requests [--root DIR] [--node NAME]`: take this node's requests (as root); print one line
    each. Exit 0 (a refused request is said, not an error of the program), 2 on a usage error."""
    parser = SubcommandParser(
        subcommand="drain-requests",
        prog="kiln-launch drain-requests",
        description="Take the drain requests jobs' watchdogs left for this node (kiln.launcher.drain_request).",
    )
    parser.add_argument("--root", help="the node's root, where its run/kiln is (default: $KILN_ROOT, else /)")
    parser.add_argument(
        "--node",
        action="append",
        help="this node's Slurm name (default: $SLURMD_NODENAME, else the short host name); again for each node of "
        "a local cluster, whose nodes share one root",
    )
    args = parser.parse_args(argv)
    root = Path(args.root or os.environ.get("KILN_ROOT") or "/")
    if not root.is_dir():
        raise UsageError(f"drain-requests: --root: {root} is not a directory")
    for line in take(root, args.node or [slurm_node.node_name(None, os.environ)]):
        print(f"kiln-launch drain-requests: {line}", flush=True)
    return 0
