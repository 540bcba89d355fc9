"""fetch.sh: cluster.env from arguments, the bundle from S3 (a stub aws CLI), then the entry point."""

from __future__ import annotations

import os
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from kiln.bootstrap.fetch import FETCH_SCRIPT, fetch_arguments, fetch_user_data
from kiln.bootstrap.render import SCRIPTS_DIR
from tests.bootstrap.conftest import SHELLCHECK

ENTRY = '#!/usr/bin/env bash\nset -euo pipefail\nprintf \'entry ran with %s\\n\' "$*" > "$KILN_ROOT/ran"\n'
VALUES = {"KILN_CLUSTER_NAME": "llm", "KILN_FSX_DNS": "fs-0123.fsx.us-east-1.amazonaws.com", "KILN_REGION": "us-east-1"}


@pytest.fixture()
def node(tmp_path: Path) -> dict:
    """A throwaway root, a bundle zip, and an `aws` stub that copies it (failing FAILS times first)."""
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        info = zipfile.ZipInfo("pcs-user-data.sh")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        bundle.writestr(info, ENTRY)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "calls"
    (bin_dir / "aws").write_text(
        "#!/usr/bin/env bash\n"
        f"echo x >> {counter}\n"
        f"[[ $(wc -l < {counter}) -gt ${{FAILS:-0}} ]] || exit 1\n"
        f'cp {archive} "$5"\n'
    )
    (bin_dir / "aws").chmod(0o755)
    root = tmp_path / "root"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KILN_ROOT": str(root), "KILN_FETCH_RETRY_DELAY_SECONDS": "0"}
    return {"root": root, "env": env, "calls": counter}


def run_fetch(node: dict, arguments: list[str], fails: int = 0) -> subprocess.CompletedProcess:
    env = {**node["env"], "FAILS": str(fails)}
    return subprocess.run(["bash", str(FETCH_SCRIPT), *arguments], env=env, capture_output=True, text=True, timeout=60)


def test_writes_cluster_env_fetches_and_runs_the_entry_point(node: dict) -> None:
    result = run_fetch(node, fetch_arguments("s3://b/k.zip", "pcs-user-data.sh", VALUES, role="worker"), fails=2)
    assert result.returncode == 0, result.stderr
    assert (node["root"] / "ran").read_text() == "entry ran with --phase all --role worker\n"
    assert len(node["calls"].read_text().split()) == 3, "two failed fetches, then one that worked"
    assert os.access(node["root"] / "opt/kiln/bootstrap/pcs-user-data.sh", os.X_OK)
    read_back = subprocess.run(
        [
            "bash",
            "-c",
            f"set -euo pipefail; source {SCRIPTS_DIR}/lib.sh; load_env_file {node['root']}/etc/kiln/cluster.env; "
            'printf "%s|%s|%s" "$KILN_CLUSTER_NAME" "$KILN_FSX_DNS" "$KILN_REGION"',
        ],
        capture_output=True,
        text=True,
        check=True,
        env=node["env"],
    )
    assert read_back.stdout == "llm|fs-0123.fsx.us-east-1.amazonaws.com|us-east-1"


def test_gives_up_after_bounded_retries_and_names_the_url(node: dict) -> None:
    result = run_fetch(node, ["s3://b/k.zip", "pcs-user-data.sh"], fails=99)
    assert result.returncode == 1
    assert "could not fetch s3://b/k.zip after 6 attempts" in result.stderr
    assert not (node["root"] / "ran").exists()


@pytest.mark.parametrize(
    "arguments", [["https://example.invalid/k.zip", "e.sh"], ["s3://b/k"], ["s3://b/k", "e.sh", "NOT_KILN=1"]]
)
def test_refuses_bad_arguments(node: dict, arguments: list[str]) -> None:
    assert run_fetch(node, arguments).returncode == 2


def test_python_side_checks_names_and_quotes() -> None:
    with pytest.raises(ValueError, match="got variable 'FSX_DNS'"):
        fetch_arguments("s3://b/k", "e.sh", {"FSX_DNS": "x"})
    with pytest.raises(ValueError, match="no single quotes"):
        fetch_arguments("s3://b/k", "e.sh", {"KILN_CLUSTER_NAME": "it's"})


def test_user_data_embeds_fetch_sh_and_passes_quoted_values(tmp_path: Path) -> None:
    text = fetch_user_data("s3://b/k.zip", "pcs-user-data.sh", VALUES, role="worker")
    script = tmp_path / "user-data.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    subprocess.run([str(SHELLCHECK), str(script)], check=True)
    assert FETCH_SCRIPT.read_text() in text
    assert text.rstrip().endswith("'KILN_REGION=us-east-1'")
