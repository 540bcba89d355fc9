"""kiln's bash library: lib.sh loads its parts (lib/*.sh, one concern each), detect_os adds the package manager's part
(pkg-apt.sh or pkg-dnf.sh, the same functions), and the entry point and kiln-step start from one preamble."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.render import SCRIPTS_DIR, TEMPLATES_DIR, library_files, render_bundle
from tests.support.bootstrap import DEFINITION, LIB_DIR, PACKAGE_PARTS, defined_functions, library_parts, pcs_config
from tests.support.node_root import OS_RELEASES

LIB = SCRIPTS_DIR / "lib.sh"
PREAMBLE = LIB_DIR / "preamble.sh"
# The preamble's callers: kiln-step and the template of every target's entry point.
CALLERS = (SCRIPTS_DIR / "kiln-step", TEMPLATES_DIR / "entry.sh.j2")
SOURCES_PREAMBLE = 'source "$(dirname "${BASH_SOURCE[0]}")/lib/preamble.sh"'
# Lines any script may share with the preamble without copying it.
_SHELL_WORDS = {"do", "done", "fi", "then", "else", "esac"}


def test_lib_sh_loads_every_part_once_and_defines_nothing_itself():
    parts = library_parts()
    assert len(parts) == len(set(parts)) > 1
    assert sorted(parts) == sorted(set(LIB_DIR.glob("*.sh")) - {PREAMBLE, *PACKAGE_PARTS})
    assert DEFINITION.findall(LIB.read_text()) == []
    assert sorted(defined_functions(LIB)) == sorted(name for part in parts for name in defined_functions(part))


@pytest.mark.parametrize("part", [*library_parts(), *PACKAGE_PARTS], ids=lambda path: path.name)
def test_every_part_defines_its_functions_the_house_way(part):
    functions = defined_functions(part)
    assert functions, f"{part.name} defines no function"
    # The text check (DEFINITION) sees every function bash finds.
    assert sorted(functions) == sorted(DEFINITION.findall(part.read_text()))


def test_both_package_parts_define_the_same_functions():
    apt, dnf = (set(defined_functions(part)) for part in PACKAGE_PARTS)
    assert apt == dnf, f"only apt: {sorted(apt - dnf)}; only dnf: {sorted(dnf - apt)}"


def _after_detect_os(tmp_path: Path, os: str, command: str) -> subprocess.CompletedProcess:
    """Run COMMAND after sourcing lib.sh and detecting the OS from OS's os-release."""
    os_release = tmp_path / "os-release"
    os_release.write_text(OS_RELEASES[os])
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f'source "$1" && {command}', "bash", str(LIB)],
        env={"PATH": "/usr/bin:/bin", "KILN_ROOT": str(tmp_path), "KILN_OS_RELEASE": str(os_release)},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(("os", "spelling"), [("ubuntu2204", "nccl=2.27.3"), ("al2023", "nccl-2.27.3")])
def test_detect_os_loads_the_package_part_of_the_nodes_os(tmp_path, os, spelling):
    package_functions = set(defined_functions(PACKAGE_PARTS[0]))
    before = _after_detect_os(tmp_path, os, "declare -F")
    assert before.returncode == 0, before.stderr
    assert package_functions.isdisjoint(line.split()[-1] for line in before.stdout.splitlines())
    after = _after_detect_os(tmp_path, os, "detect_os && pinned_package nccl 2.27.3")
    assert after.returncode == 0, after.stderr
    assert after.stdout == f"{spelling}\n"


def _preamble_lines() -> list[str]:
    """Return the preamble's commands: its lines but blanks, comments and bare shell keywords."""
    lines = (line.strip() for line in PREAMBLE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#") and line not in _SHELL_WORDS]


@pytest.mark.parametrize("caller", CALLERS, ids=lambda path: path.name)
def test_the_entry_point_and_kiln_step_source_the_preamble_and_keep_no_copy_of_it(caller):
    text = caller.read_text()
    assert text.count(SOURCES_PREAMBLE) == 1
    own = {line.strip() for line in text.splitlines()}
    assert [line for line in _preamble_lines() if line in own] == []


def test_the_preamble_check_sees_a_copied_line():
    # A caller that loads the steps itself again is one the test above refuses.
    copied = {line.strip() for line in (SCRIPTS_DIR / "kiln-step").read_text().splitlines()} | {"kiln_install_traps"}
    assert [line for line in _preamble_lines() if line in copied] == ["kiln_install_traps"]


def test_every_bundle_carries_the_whole_library_as_it_is(tmp_path):
    bundle = render_bundle(pcs_config(), tmp_path / "bundle").directory
    assert {"kiln-step", "lib.sh", "lib/preamble.sh", "lib/pkg-apt.sh", "lib/pkg-dnf.sh"} <= set(library_files())
    for relative in library_files():
        assert (bundle / relative).read_bytes() == (SCRIPTS_DIR / relative).read_bytes(), relative
    assert sorted(p.name for p in (bundle / "lib").iterdir()) == sorted(p.name for p in LIB_DIR.iterdir())
