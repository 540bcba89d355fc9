"""`kiln job submit` refuses bad input in one line that says what is wrong: --max-restarts outside 0..int32 (the
PyTorchJob's backoffLimit), a --name that is no DNS-1035 label, a script that is a FIFO, a device or a directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kiln.cli.jobs import MAX_RESTARTS_MAX
from kiln.cli.main import main
from tests.support.jobs import IMAGE
from tests.support.paths import ROOT

SPEC = ROOT / "examples" / "p5-eks.yaml"


def submit(capsys: pytest.CaptureFixture, *options: str, script: Path | str) -> tuple[int, str, str]:
    code = main(["job", "submit", "--spec", str(SPEC), "--image", IMAGE, *options, "--", str(script)])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("restarts", ["-1", str(MAX_RESTARTS_MAX + 1), str(2**63)])
def test_max_restarts_outside_0_to_int32_is_refused_in_one_line(capsys, script, restarts) -> None:
    code, _, err = submit(capsys, "--max-restarts", restarts, script=script)
    assert code == 2
    line = one_line(err)
    assert f"--max-restarts: got {restarts}; allowed: 0 to 2147483647" in line, line


@pytest.mark.parametrize("restarts", [0, MAX_RESTARTS_MAX])
def test_max_restarts_takes_0_and_the_int32_maximum_into_the_job(capsys, script, restarts) -> None:
    code, out, err = submit(capsys, "--max-restarts", str(restarts), script=script)
    assert code == 0, err
    _, job = yaml.safe_load_all(out)
    assert job["spec"]["runPolicy"]["backoffLimit"] == restarts
    assert MAX_RESTARTS_MAX == 2**31 - 1


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("../../etc", "which holds '.' '/'"),
        ("Train", "which holds 'T'"),
        ("1train", "which does not start with a letter"),
        ("train-", "which ends in '-'"),
        ("a" * 41, "which is 41 characters long"),
        ("", "which is empty"),
    ],
)
def test_a_bad_name_says_what_is_wrong_with_it_and_the_rule(capsys, script, name, fault) -> None:
    code, _, err = submit(capsys, "--name", name, script=script)
    assert code == 2
    line = one_line(err)
    assert f"--name: got {name!r}, {fault}; a job name is a Kubernetes DNS-1035 label" in line, line
    assert "a lowercase letter, then up to 39 lowercase letters, digits or '-', not ending in '-'" in line
    assert "the script's name" not in line


def test_a_fifo_is_refused_as_a_fifo_without_blocking(capsys, tmp_path) -> None:
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    code, _, err = submit(capsys, script=fifo)
    assert code == 2
    line = one_line(err)
    assert f"{fifo}: is a named pipe (FIFO), not a file" in line and "no such file" not in line, line


def test_a_device_and_a_directory_are_refused_as_what_they_are(capsys, tmp_path) -> None:
    code, _, err = submit(capsys, script="/dev/null")
    assert code == 2 and "/dev/null: is a character device, not a file" in one_line(err)
    code, _, err = submit(capsys, script=tmp_path)
    assert code == 2 and f"{tmp_path}: is a directory, not a file" in one_line(err)
    code, _, err = submit(capsys, script=tmp_path / "missing.py")
    assert code == 2 and "missing.py: no such file (the training script)" in one_line(err)
