"""A scontrol on PATH backed by files: `show job`, `show node`, `show hostnames` answer from them as Slurm does,
`update NodeName=... State=DRAIN|FAIL Reason=...` changes the node's record (or is refused as Slurm refuses a user
who is not an operator), and every call is logged."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = """#!{python}
import json, sys
from pathlib import Path
state = Path({state!r})
args = sys.argv[1:]
with open(state / "calls.jsonl", "a") as log:
    log.write(json.dumps(args) + "\\n")
data = json.loads((state / "state.json").read_text())
if args[:2] == ["show", "job"]:
    job = data["jobs"].get(args[2])
    if job is None:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        sys.exit(1)
    print(job)
elif args[:2] == ["show", "node"]:
    node = data["nodes"][args[2]]
    reason = f" Reason={{node['reason']}}" if node.get("reason") else ""
    print(f"NodeName={{args[2]}} Arch=x86_64 State={{node['state']}}{{reason}}")
elif args[:2] == ["show", "hostnames"]:
    print("\\n".join(data["hostnames"].get(args[2], [])))
elif args[:1] == ["update"]:
    if data.get("deny_update"):
        print("slurm_update error: Invalid user id", file=sys.stderr)
        sys.exit(1)
    fields = dict(a.split("=", 1) for a in args[1:])
    node = data["nodes"][fields["NodeName"]]
    base = node["state"].split("+")[0]
    node["state"] = base + "+DRAIN" if fields["State"] == "DRAIN" else fields["State"]
    node["reason"] = fields.get("Reason", "")
    (state / "state.json").write_text(json.dumps(data))
elif args[:1] == ["requeue"] and args[1] in data["jobs"]:
    pass
else:
    sys.exit(2)
"""


@dataclass
class FakeSlurm:
    """The fake's files and the environment that puts it first on PATH."""

    state_dir: Path
    environ: dict[str, str]

    def read(self) -> dict:
        return json.loads((self.state_dir / "state.json").read_text())

    def write(self, data: dict) -> None:
        (self.state_dir / "state.json").write_text(json.dumps(data))

    def node(self, name: str) -> dict[str, str]:
        return self.read()["nodes"][name]

    def calls(self) -> list[list[str]]:
        path = self.state_dir / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def job_record(job_id: str, *, state: str = "RUNNING", user: str = "alice(1001)", nodes: str = "node[1-2]") -> str:
    """Return `scontrol show job --oneliner` as Slurm prints it, with the fields the hand-off reads."""
    return (
        f"JobId={job_id} JobName=llm UserId={user} GroupId=alice(1001) JobState={state} Reason=None "
        f"Requeue=1 Restarts=0 BatchFlag=1 NodeList={nodes} BatchHost=node1 NumNodes=2 TRES=cpu=4,node=2"
    )


def fake_slurm(
    tmp_path: Path,
    *,
    jobs: dict[str, str] | None = None,
    nodes: dict[str, dict[str, str]] | None = None,
    hostnames: dict[str, list[str]] | None = None,
    deny_update: bool = False,
) -> FakeSlurm:
    """Write the fake under TMP_PATH with JOBS (id -> record), NODES (name -> {state, reason}) and HOSTNAMES."""
    state = tmp_path / "fake-slurm"
    (state / "bin").mkdir(parents=True)
    fake = FakeSlurm(state_dir=state, environ={"PATH": f"{state / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    fake.write(
        {
            "jobs": jobs if jobs is not None else {"42": job_record("42")},
            "nodes": nodes if nodes is not None else {"node1": {"state": "MIXED"}, "node2": {"state": "MIXED"}},
            "hostnames": hostnames if hostnames is not None else {"node[1-2]": ["node1", "node2"]},
            "deny_update": deny_update,
        }
    )
    script = state / "bin/scontrol"
    script.write_text(_SCRIPT.format(python=sys.executable, state=str(state)))
    script.chmod(0o755)
    return fake
