"""The hostlist expander against explicit expectations and against real `scontrol show hostnames`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kiln.launcher.hostlist import expand, first_host

# Forms every Slurm accepts; ours must print exactly what scontrol prints.
CORE = [
    "node[01-03,7]",
    "node[1-2],gpu-[1-2]",
    "rack[1-2]-n[01-02]",
    "n[1-2][5-6]",
    "ip-10-0-[1-2]-[3,5]",
    "a[8-11]",
    "a[09-11]",
    "a[001-3]",
    "a[01-2]",
    "a[1-02]",
    "a[7-012]",
    "a[00-00]",
    "a[1-3],a2",
    "a[1-3,2]",
    "node1 node2",
    "a,,b",
    "a[1-2],",
    ",a",
    "[1-2]",
    "a-[00-02],b",
    "node001,node[002-003]",
    "a.b[1-2]",
    "a_b[1-2]",
    "n[1-2]-[3-4],m",
]
# Text after a bracket group: the issue's own example. Slurm 22.05 (Debian 12)
# rejects these; newer scontrol may not, and then ours must agree with it.
SUFFIXED = {
    "node[01-03,7],gpu-[1-2]-x": ["node01", "node02", "node03", "node7", "gpu-1-x", "gpu-2-x"],
    "y[1,3-4]z": ["y1z", "y3z", "y4z"],
    "a[1-2]b[3-4]c": ["a1b3c", "a1b4c", "a2b3c", "a2b4c"],
    "gpu-[1-2]-x,a": ["gpu-1-x", "gpu-2-x", "a"],
}
# scontrol reports these as invalid; we raise.
INVALID = ["a[3-1]", "a[[1]]", "a[]", "a[1,,2]", "a[x-y]", "a[1-3:2]", "a[1-70000]", "a[-2]", "a[010-8]"]
# scontrol prints nonsense for these ("a]", "a1"); we raise rather than guess.
MALFORMED = ["a[1-2", "a]", "a[1-]", "a[1-3]]", "a[ 1-2]"]


def test_expands_the_issue_example():
    assert expand("node[01-03,7],gpu-[1-2]-x") == ["node01", "node02", "node03", "node7", "gpu-1-x", "gpu-2-x"]


@pytest.mark.parametrize(("expression", "hosts"), SUFFIXED.items())
def test_expands_text_after_brackets(expression, hosts):
    assert expand(expression) == hosts


@pytest.mark.parametrize("expression", INVALID + MALFORMED)
def test_rejects_bad_lists(expression):
    with pytest.raises(ValueError, match="hostlist"):
        expand(expression)


def test_first_host_is_the_rendezvous_host():
    assert first_host("gpu-st-p5-[07-09],gpu-st-p5-2") == "gpu-st-p5-07"
    with pytest.raises(ValueError, match="names no host"):
        first_host(" , ")


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory):
    """Return a function running the real `scontrol show hostnames` with a throwaway slurm.conf."""
    binary = shutil.which("scontrol")
    if binary is None:
        pytest.skip("scontrol not installed (Debian package slurm-client); cannot compare with real Slurm")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    # Enough config for scontrol to parse hostlists without contacting anything (no DNS SRV lookup).
    conf.write_text(
        "ClusterName=kilntest\nSlurmctldHost=localhost\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES State=UP\n"
    )

    def show(expression: str) -> list[str] | None:
        done = subprocess.run(
            [binary, "show", "hostnames", expression],
            env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        output = done.stdout + done.stderr
        if done.returncode != 0 or "Invalid hostlist" in output or "error" in output:
            return None
        return done.stdout.split()

    return show


@pytest.mark.parametrize("expression", CORE)
def test_matches_scontrol(scontrol, expression):
    real = scontrol(expression)
    assert real is not None, f"scontrol rejected {expression!r}"
    assert expand(expression) == real


@pytest.mark.parametrize("expression", INVALID)
def test_rejects_what_scontrol_rejects(scontrol, expression):
    assert scontrol(expression) is None
    with pytest.raises(ValueError):
        expand(expression)


@pytest.mark.parametrize("expression", SUFFIXED)
def test_suffixes_match_scontrol_where_it_accepts_them(scontrol, expression):
    real = scontrol(expression)
    if real is None:
        pytest.skip(f"this scontrol rejects text after a bracket ({expression!r}); covered by the explicit test")
    assert expand(expression) == real


def test_largest_range_slurm_allows_matches_scontrol(scontrol):
    assert expand("a[0-65535]") == scontrol("a[0-65535]")
