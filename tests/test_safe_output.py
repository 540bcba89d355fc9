"""Refusals: no kiln command ever removes or overwrites what kiln did not create.

Every case builds its own temp directory holding a file that must survive; no real system path is used.
The home directory is a temp directory (HOME), and the current directory is one too (chdir).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from kiln.bootstrap.config import BootstrapConfig, NodeGroup, SoftwarePins
from kiln.bootstrap.render import render_bundle
from kiln.cli.main import main
from kiln.host.safe_output import (
    MARKER,
    UnsafeOutput,
    claim_directory,
    is_kiln_output,
    protected_reason,
    remove_owned_directory,
    replaced_directory,
    write_file_atomically,
)
from tests.support.paths import ROOT

SPEC = ROOT / "examples" / "quickstart.yaml"
KEEP = "the user's file\n"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home (HOME) holding a project folder that is the current directory, each with a file to keep."""
    home = tmp_path / "home"
    project = home / "work" / "project"
    project.mkdir(parents=True)
    for folder in (home, home / "work", project):
        (folder / "keep.txt").write_text(KEEP)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    return home


def _intact(folder: Path) -> None:
    assert (folder / "keep.txt").read_text() == KEEP
    assert not is_kiln_output(folder)
    # Nothing of kiln's left beside it either (no staging or retired directories).
    assert not [p for p in folder.parent.iterdir() if ".kiln-" in p.name]


def _pcs_config() -> BootstrapConfig:
    return BootstrapConfig(
        target="pcs", groups=(NodeGroup(name="gpu", instance_type="g5.12xlarge"),), software=SoftwarePins(slurm="25.11")
    )


def test_the_root_is_protected_without_touching_it() -> None:
    # A pure check: nothing is written or listed.
    assert protected_reason("/") == "it is the filesystem root"
    assert protected_reason("/.") == "it is the filesystem root"


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        (lambda home: home, "it is the home directory"),
        (lambda home: home / "work" / "project", "it is the current directory"),
        (lambda home: Path("."), "it is the current directory"),
        (lambda home: home / "work", "it contains the current directory"),
        (lambda home: home / "work" / "project" / "..", "it contains the current directory"),
    ],
    ids=["home", "cwd", "dot", "ancestor", "dotdot"],
)
def test_bootstrap_render_refuses_protected_directories(world: Path, capsys, where, reason: str) -> None:
    target = where(world)
    code = main(["bootstrap", "render", "--spec", str(SPEC), "--target", "pcs", "--out", str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and reason in err[0] and err[0].startswith("kiln bootstrap render: ")
    for folder in (world, world / "work", world / "work" / "project"):
        _intact(folder)


def test_bootstrap_render_refuses_a_folder_kiln_did_not_make(world: Path, capsys) -> None:
    theirs = world / "work" / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text(KEEP)
    code = main(["bootstrap", "render", "--spec", str(SPEC), "--target", "pcs", "--out", str(theirs)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "kiln did not make it" in err[0]
    _intact(theirs)


def test_bootstrap_render_refuses_a_file_and_a_symlink(world: Path, capsys) -> None:
    a_file = world / "work" / "notes.txt"
    a_file.write_text(KEEP)
    elsewhere = world / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text(KEEP)
    link = world / "work" / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    for target in (a_file, link):
        assert main(["bootstrap", "render", "--spec", str(SPEC), "--target", "pcs", "--out", str(target)]) == 2
        assert "not a directory" in capsys.readouterr().err
    assert a_file.read_text() == KEEP
    _intact(elsewhere)


def test_bootstrap_render_replaces_its_own_earlier_render_and_fills_an_empty_folder(world: Path) -> None:
    out = world / "work" / "bundle"
    out.mkdir()
    render_bundle(_pcs_config(), out)
    assert is_kiln_output(out) and (out / "pcs-user-data.sh").is_file()
    (out / "stale-file").write_text("from an earlier render\n")
    render_bundle(_pcs_config(), out)
    assert not (out / "stale-file").exists() and (out / "pcs-user-data.sh").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle", "keep.txt", "project"]


def test_a_failed_render_leaves_the_target_as_it_was(world: Path) -> None:
    out = world / "work" / "bundle"
    with pytest.raises(RuntimeError), replaced_directory(out, what="test") as staging:
        (staging / "half").write_text("half a render\n")
        raise RuntimeError("render failed half way")
    assert not out.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["keep.txt", "project"]


def test_removal_needs_the_marker_and_never_takes_protected_paths(world: Path) -> None:
    theirs = world / "work" / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text(KEEP)
    with pytest.raises(UnsafeOutput, match="kiln did not make it"):
        remove_owned_directory(theirs, what="test")
    _intact(theirs)
    (world / MARKER).write_text("{}\n")  # even a marked home directory is never removed
    with pytest.raises(UnsafeOutput, match="home directory"):
        remove_owned_directory(world, what="test")
    assert (world / "keep.txt").read_text() == KEEP
    ours = claim_directory(world / "work" / "ours", what="test")
    (ours / "state").write_text("kiln's\n")
    remove_owned_directory(ours, what="test")
    assert not ours.exists()


def test_claim_refuses_what_kiln_did_not_make(world: Path) -> None:
    with pytest.raises(UnsafeOutput, match="contains the current directory"):
        claim_directory(world / "work", what="test")
    theirs = world / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text(KEEP)
    with pytest.raises(UnsafeOutput, match="kiln did not make it"):
        claim_directory(theirs, what="test")
    _intact(theirs)


def test_single_files_are_replaced_atomically_and_directories_refused(world: Path) -> None:
    target = world / "work" / "schema.json"
    write_file_atomically(target, "one\n", what="test")
    write_file_atomically(target, "two\n", what="test")
    assert target.read_text() == "two\n"
    with pytest.raises(UnsafeOutput, match="is a directory"):
        write_file_atomically(world / "work" / "project", "x", what="test")
    _intact(world / "work" / "project")
    assert sorted(p.name for p in target.parent.iterdir()) == ["keep.txt", "project", "schema.json"]


def test_schema_out_refuses_a_directory_in_one_line(world: Path, capsys) -> None:
    assert main(["schema", "--out", str(world / "work" / "project")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a directory" in err[0]
    _intact(world / "work" / "project")
    assert main(["schema", "--out", "spec.schema.json"]) == 0
    assert Path("spec.schema.json").read_text() == (ROOT / "spec.schema.json").read_text()


def test_catalog_refresh_cannot_write_over_a_directory(world: Path) -> None:
    from kiln.catalog.refresh import refresh

    class NoCallExpected:
        def __getattr__(self, name: str):
            raise AssertionError(f"EC2 was called ({name}) although the output is refused")

    with pytest.raises(UnsafeOutput):
        refresh(region="us-east-1", out=world / "work" / "project", client=NoCallExpected())
    _intact(world / "work" / "project")


def test_local_prefix_refuses_home_cwd_ancestors_and_foreign_folders(world: Path) -> None:
    from kiln.local.errors import LocalError
    from kiln.local.preflight import check_prefix

    theirs = world / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text(KEEP)
    for prefix, words in (
        (world, "home directory"),
        (Path.cwd(), "current directory"),
        (world / "work", "contains the current directory"),
        (theirs, "holds no kiln local cluster"),
    ):
        with pytest.raises(LocalError, match=words):
            check_prefix(Path(os.path.abspath(prefix)))
    _intact(theirs)


def test_local_down_removes_only_a_prefix_kiln_made(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.local import cluster
    from kiln.local.errors import LocalError
    from kiln.local.layout import plan_layout
    from kiln.local.state import ClusterState, save

    prefix = world / "theirs"
    prefix.mkdir()
    (prefix / "keep.txt").write_text(KEEP)
    # A state file planted in a folder kiln never claimed: down stops the (no) daemons, then refuses.
    save(ClusterState(layout=plan_layout(prefix=str(prefix), nodes=1)))
    monkeypatch.setattr(cluster, "_checks_for_root", lambda: None)
    with pytest.raises(LocalError, match="kiln did not make it"):
        cluster.down(str(prefix), out=io.StringIO())
    assert (prefix / "keep.txt").read_text() == KEEP


def test_synthesize_refuses_an_outdir_it_did_not_make(world: Path) -> None:
    from kiln.spec import load_spec
    from kiln.stacks.synth import synthesize

    theirs = world / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text(KEEP)
    with pytest.raises(UnsafeOutput, match="kiln did not make it"):
        synthesize(load_spec(SPEC), theirs, nag=False)
    with pytest.raises(UnsafeOutput, match="contains the current directory"):
        synthesize(load_spec(SPEC), world / "work", nag=False)
    for folder in (theirs, world / "work", world / "work" / "project"):
        _intact(folder)
