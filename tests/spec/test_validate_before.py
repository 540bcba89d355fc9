"""`kiln validate NEW --before OLD` (issue 46, item 2): before anything is synthesized, one line per change from the
spec the cluster was made from that its service refuses in that direction, by the rules `kiln diff` judges the
templates with (platforms.json, cloudformation.one_way_properties): exit 2, like any other problem of the spec."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.cli.main import main
from kiln.spec.rules import software as software_rules
from tests.support.specs import DELETE, MINIMAL_SPEC, changed

FSX = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html"
EKS = "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html"
PCS = "https://docs.aws.amazon.com/pcs/latest/userguide/working-with_clusters_version_update.html"
FAILS = "so deploying it over the cluster made from the old spec fails and rolls back"
EKS_SPEC = changed(
    MINIMAL_SPEC,
    compute__backend="eks",
    network__second_availability_zone="us-east-1b",
)


def _validate(tmp_path: Path, capsys, before: dict[str, Any], after: dict[str, Any]) -> tuple[int, str, list[str]]:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(before))
    new.write_text(yaml.safe_dump(after))
    code = main(["validate", "--accept-unready", str(new), "--before", str(old)])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.startswith(f"{new}: ")]


def test_a_smaller_file_system_is_refused_in_one_line(tmp_path, capsys) -> None:
    before = changed(MINIMAL_SPEC, storage__lustre__storage_gib=4800)
    code, out, lines = _validate(tmp_path, capsys, before, MINIMAL_SPEC)
    assert code == 2 and out == ""
    assert lines == [
        f"{tmp_path / 'new.yaml'}: storage.lustre.storage_gib 4800 -> 2400: FSx for Lustre only increases a file "
        f"system's storage capacity, never decreases it ({FSX}), {FAILS}; keep 4800 or more"
    ]


def test_a_larger_file_system_or_one_the_change_replaces_is_valid(tmp_path, capsys) -> None:
    before = changed(MINIMAL_SPEC, storage__lustre__storage_gib=4800)
    for after in (
        changed(MINIMAL_SPEC, storage__lustre__storage_gib=7200),
        # A new deployment type makes a new file system (kiln diff says it starts empty): any size goes.
        changed(MINIMAL_SPEC, storage__lustre__deployment="SCRATCH_2"),
        # A new AZ does too (its subnet is create-only), and a spec without Lustre has nothing to shrink.
        changed(MINIMAL_SPEC, availability_zone="us-east-1b"),
        changed(MINIMAL_SPEC, storage__lustre=DELETE),
    ):
        code, out, lines = _validate(tmp_path, capsys, before, after)
        assert (code, lines) == (0, []), after
        assert out.startswith(str(tmp_path / "new.yaml"))


@pytest.mark.parametrize(
    ("old", "new", "remedy"),
    [
        ("1.36", "1.34", "keep 1.36 or a newer version"),
        # No version: the newest kiln runs on EKS (1.36), so pinning an older one is a downgrade too.
        (None, "1.35", "keep 1.36 or a newer version"),
        ("1.34", "1.36", "deploy 1.35 first, then 1.36"),
    ],
)
def test_an_eks_version_down_or_two_minors_up_is_refused(tmp_path, capsys, old, new, remedy) -> None:
    before = changed(EKS_SPEC, compute__kubernetes_version=old if old else DELETE)
    code, _, lines = _validate(tmp_path, capsys, before, changed(EKS_SPEC, compute__kubernetes_version=new))
    assert code == 2
    assert lines == [
        f"{tmp_path / 'new.yaml'}: compute.kubernetes_version {old or '1.36'} -> {new}: EKS moves a cluster's "
        f"Kubernetes version up one minor version at a time and never back ({EKS}), {FAILS}; {remedy}"
    ]


def test_an_eks_version_one_minor_up_is_valid(tmp_path, capsys) -> None:
    before = changed(EKS_SPEC, compute__kubernetes_version="1.35")
    code, _, lines = _validate(tmp_path, capsys, before, changed(EKS_SPEC, compute__kubernetes_version="1.36"))
    assert (code, lines) == (0, [])


def test_an_older_slurm_version_is_refused_and_a_newer_one_is_valid(tmp_path, capsys, monkeypatch) -> None:
    # A day PCS still supports 25.05; the spec without software.slurm runs PCS's newest, 25.11.
    monkeypatch.setattr(software_rules, "today", lambda: datetime.date(2026, 6, 1))
    older = changed(MINIMAL_SPEC, software__slurm="25.05")
    code, _, lines = _validate(tmp_path, capsys, MINIMAL_SPEC, older)
    assert code == 2
    assert lines == [
        f"{tmp_path / 'new.yaml'}: software.slurm 25.11 -> 25.05: PCS moves a cluster's Slurm version only to a "
        f"newer one its current version is compatible with ({PCS}), {FAILS}; keep 25.11 or a newer version"
    ]
    assert _validate(tmp_path, capsys, older, MINIMAL_SPEC)[::2] == (0, [])


def test_a_deployed_cluster_on_a_version_past_its_support_is_read(tmp_path, capsys, monkeypatch) -> None:
    # PCS no longer lets a new cluster run 25.05, but the cluster the old spec made still does, and moving it to
    # 25.11 is the way out: `--before` reads that spec, while a NEW spec on 25.05 is still refused.
    monkeypatch.setattr(software_rules, "today", lambda: datetime.date(2026, 12, 7))
    older = changed(MINIMAL_SPEC, software__slurm="25.05")
    assert _validate(tmp_path, capsys, older, MINIMAL_SPEC)[::2] == (0, [])
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(older))
    assert main(["validate", "--accept-unready", str(tmp_path / "new.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "software.slurm" in err and "stopped supporting on 2026-11-30" in err


def test_another_backend_is_another_cluster(tmp_path, capsys) -> None:
    # The PCS cluster goes and an EKS cluster comes: no version of the one moves to the other.
    before = changed(MINIMAL_SPEC, storage__lustre__storage_gib=4800)
    after = changed(EKS_SPEC, storage__lustre__storage_gib=4800, compute__kubernetes_version="1.34")
    assert _validate(tmp_path, capsys, before, after)[::2] == (0, [])


def test_a_bad_before_spec_says_its_own_lines(tmp_path, capsys) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(changed(MINIMAL_SPEC, storage__lustre__storage_gib=1000)))
    new.write_text(yaml.safe_dump(MINIMAL_SPEC))
    assert main(["validate", str(new), "--before", str(old)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() and all(line.startswith(f"{old}") for line in err.splitlines())
    assert "storage_gib" in err
