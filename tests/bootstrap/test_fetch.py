"""fetch.sh: cluster.env from arguments, the bundle from S3 (a stub aws CLI), checked against its digest, then the
entry point."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from kiln.bootstrap.fetch import (
    FETCH_SCRIPT,
    RESOLVE_SCRIPT,
    bundle_digest,
    fetch_arguments,
    fetch_user_data,
    file_sha256,
    node_manifest,
)
from kiln.bootstrap.render import SCRIPTS_DIR
from kiln.contracts.bundle import VERIFIED_UNPACK
from tests.support.bootstrap import SHELLCHECK

ENTRY = '#!/usr/bin/env bash\nset -euo pipefail\nprintf \'entry ran with %s\\n\' "$*" > "$KILN_ROOT/ran"\n'
VALUES = {"KILN_CLUSTER_NAME": "llm", "KILN_FSX_DNS": "fs-0123.fsx.us-east-1.amazonaws.com", "KILN_REGION": "us-east-1"}


@pytest.fixture()
def node(tmp_path: Path) -> dict:
    """A throwaway root, a bundle zip and its digest, and an `aws` stub that copies it (failing FAILS times first)."""
    archive = tmp_path / "bundle.zip"
    source = tmp_path / "source"
    source.mkdir()
    (source / "pcs-user-data.sh").write_text(ENTRY)
    (source / "pcs-user-data.sh").chmod(0o755)
    _zip_as_cdk_does(source, archive)
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
    return {"root": root, "env": env, "calls": counter, "archive": archive, "digest": bundle_digest(source)}


def run_fetch(node: dict, arguments: list[str], fails: int = 0) -> subprocess.CompletedProcess:
    env = {**node["env"], "FAILS": str(fails)}
    return subprocess.run(["bash", str(FETCH_SCRIPT), *arguments], env=env, capture_output=True, text=True, timeout=60)


def test_writes_cluster_env_fetches_and_runs_the_entry_point(node: dict) -> None:
    arguments = fetch_arguments("s3://b/k.zip", "pcs-user-data.sh", VALUES, role="worker", bundle_sha256=node["digest"])
    result = run_fetch(node, arguments, fails=2)
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
    result = run_fetch(node, ["s3://b/k.zip", "pcs-user-data.sh", "--sha256", node["digest"]], fails=99)
    assert result.returncode == 1
    assert "could not fetch s3://b/k.zip after 6 attempts" in result.stderr
    assert not (node["root"] / "ran").exists()


DIGEST = "d" * 64


@pytest.mark.parametrize(
    "arguments",
    [
        ["https://example.invalid/k.zip", "e.sh", "--sha256", DIGEST],
        ["s3://b/k"],
        ["s3://b/k", "e.sh", "--sha256", DIGEST, "NOT_KILN=1"],
        ["s3://b/k", "e.sh", "--sha256", "D" * 64],
    ],
)
def test_refuses_bad_arguments(node: dict, arguments: list[str]) -> None:
    assert run_fetch(node, arguments).returncode == 2


@pytest.mark.parametrize(
    "arguments",
    [["s3://b/k.zip", "pcs-user-data.sh", "KILN_REGION=us-east-1"], ["s3://b/k.zip", "e.sh", "--sha256"]],
)
def test_without_a_digest_nothing_is_fetched_or_run(node: dict, arguments: list[str]) -> None:
    """fetch.sh runs only a bundle it can check: without --sha256 it refuses, says so in fetch.log, and exits 2."""
    result = run_fetch(node, arguments)
    assert result.returncode == 2
    line = "refusing s3://b/k.zip: no sha256 to check it against"
    assert line in result.stderr and line in (node["root"] / "var/log/kiln/fetch.log").read_text()
    assert not node["calls"].exists(), "the bundle was never fetched"
    assert not (node["root"] / "ran").exists()


def test_python_side_checks_names_quotes_and_the_digest() -> None:
    with pytest.raises(ValueError, match="got variable 'FSX_DNS'"):
        fetch_arguments("s3://b/k", "e.sh", {"FSX_DNS": "x"}, bundle_sha256=DIGEST)
    with pytest.raises(ValueError, match="no single quotes"):
        fetch_arguments("s3://b/k", "e.sh", {"KILN_CLUSTER_NAME": "it's"}, bundle_sha256=DIGEST)
    with pytest.raises(ValueError, match="s3://b/k: no bundle digest: fetch.sh runs only a bundle it can check"):
        fetch_arguments("s3://b/k", "e.sh", {}, bundle_sha256="")


def _retouched(directory: Path, relative: str, target: Path) -> Path:
    """Copy DIRECTORY to TARGET with one byte of file RELATIVE changed; return TARGET."""
    shutil.copytree(directory, target, symlinks=False)
    path = target / relative
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return target


def test_a_real_bundle_with_one_byte_changed_is_refused_naming_the_object_and_both_digests(
    node: dict, pcs_bundle: Path, tmp_path: Path
) -> None:
    """kiln's rendered PCS bundle, zipped as CDK zips an asset: fetch.sh takes it with its bundle_digest, and refuses
    the same zip with one byte of one step changed: nothing unpacked, nothing run, fetch.log says why."""
    expected = bundle_digest(pcs_bundle)
    log = node["root"] / "var/log/kiln/fetch.log"
    # The bundle as rendered passes the check (bundle.env as the entry point: plain assignments, safe to run here).
    _zip_as_cdk_does(pcs_bundle, node["archive"])
    result = run_fetch(node, fetch_arguments("s3://b/k.zip", "bundle.env", VALUES, bundle_sha256=expected))
    assert result.returncode == 0, result.stderr
    assert f"content sha256 {expected}" in log.read_text()
    shutil.rmtree(node["root"])
    tampered = _retouched(pcs_bundle, "steps/configure_imds.sh", tmp_path / "tampered")
    actual = bundle_digest(tampered)
    assert actual != expected
    _zip_as_cdk_does(tampered, node["archive"])
    result = run_fetch(node, fetch_arguments("s3://b/k.zip", "pcs-user-data.sh", VALUES, bundle_sha256=expected))
    assert result.returncode == 1
    refusal = f"s3://b/k.zip: the bundle's content has sha256 {actual}, expected {expected}: refusing to unpack"
    assert refusal in result.stderr and refusal in log.read_text()
    assert "the bundle from s3://b/k.zip was not unpacked and nothing in it ran" in log.read_text()
    assert not any((node["root"] / "opt/kiln/bootstrap").iterdir()), "nothing was written from the zip"
    assert not (node["root"] / "opt/kiln/bootstrap.zip").exists()
    assert not (node["root"] / "ran").exists()


def test_a_zip_without_its_entry_point_or_with_a_forged_listing_is_refused(node: dict, tmp_path: Path) -> None:
    """The entry point must be one of the checked files; a name with a line break could forge the listing."""
    result = run_fetch(node, fetch_arguments("s3://b/k.zip", "other.sh", VALUES, bundle_sha256=node["digest"]))
    assert result.returncode == 1 and "s3://b/k.zip: the bundle has no other.sh: refusing to run it" in result.stderr
    with zipfile.ZipFile(node["archive"], "w") as bundle:
        bundle.writestr("pcs-user-data.sh", ENTRY)
        bundle.writestr(f"a\n{'0' * 64}  b", "x")
    result = run_fetch(node, fetch_arguments("s3://b/k.zip", "pcs-user-data.sh", VALUES, bundle_sha256=DIGEST))
    assert result.returncode == 1 and "a file name in the zip holds a line break" in result.stderr
    assert not (node["root"] / "ran").exists()


def test_user_data_embeds_fetch_sh_and_passes_quoted_values(tmp_path: Path) -> None:
    text = fetch_user_data("s3://b/k.zip", "pcs-user-data.sh", VALUES, role="worker", bundle_sha256=DIGEST)
    script = tmp_path / "user-data.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    subprocess.run([str(SHELLCHECK), str(script)], check=True)
    assert FETCH_SCRIPT.read_text() in text
    assert f"'pcs-user-data.sh' '--sha256' '{DIGEST}' '--role' 'worker'" in text
    assert text.rstrip().endswith("'KILN_REGION=us-east-1'")


# ---- ParallelCluster: resolve-bootstrap.sh reads the manifest from SSM, fetch.sh checks the bundle's digest. ----

# resolve-bootstrap.sh is every ParallelCluster node's OnNodeConfigured Script, which ParallelCluster never updates
# on a head node: a changed file is a new S3 key, which every cluster made before can only take by being made anew.
# Change this digest only with that in the release notes.
RESOLVE_SCRIPT_SHA256 = "1fe742f8dd718830550da1d8ec5ddc2412342808c46538684a053e539efdc893"


def _bundle_dir(tmp_path: Path) -> Path:
    """A bundle as the renderer leaves it: an entry point, a file below a directory, a dot file and a link."""
    bundle = tmp_path / "bundle"
    (bundle / "steps").mkdir(parents=True)
    (bundle / "parallelcluster.sh").write_text(ENTRY)
    (bundle / "parallelcluster.sh").chmod(0o755)
    (bundle / "steps" / "a.sh").write_text("echo a\n")
    (bundle / ".hidden").write_text("x\n")
    (bundle / "lib.sh").symlink_to(bundle / "steps" / "a.sh")
    return bundle


def _zip_as_cdk_does(directory: Path, archive: Path) -> None:
    """Zip DIRECTORY as the CDK zips an asset directory: files only (links followed, dot files too), with modes."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(path.relative_to(directory).as_posix())
                info.external_attr = (stat.S_IFREG | stat.S_IMODE(path.stat().st_mode)) << 16
                bundle.writestr(info, path.read_bytes())


@pytest.fixture()
def pc_node(tmp_path: Path) -> dict:
    """A ParallelCluster node: S3 objects in a directory, an SSM parameter in a file, an `aws` stub serving both."""
    objects = tmp_path / "objects"
    (objects / "assets").mkdir(parents=True)
    bundle = _bundle_dir(tmp_path)
    _zip_as_cdk_does(bundle, objects / "assets" / "bundle.zip")
    shutil.copy(FETCH_SCRIPT, objects / "assets" / "fetch.sh")
    manifest = node_manifest(
        fetch_url="s3://assets/fetch.sh",
        fetch_sha256=file_sha256(FETCH_SCRIPT),
        bundle_url="s3://assets/bundle.zip",
        entry_point="parallelcluster.sh",
        values=VALUES,
        bundle_sha256=bundle_digest(bundle),
    )
    parameter = tmp_path / "parameter.json"
    parameter.write_text(json.dumps(manifest))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "aws").write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        'case "$1 $2" in\n'
        f'  "ssm get-parameter") (($(grep -c "^ssm" {calls}) > ${{SSM_FAILS:-0}})) || exit 1; cat {parameter} ;;\n'
        f'  "s3 cp") cp "{objects}/${{4#s3://}}" "$5" ;;\n'
        "  *) exit 9 ;;\n"
        "esac\n"
    )
    (bin_dir / "aws").chmod(0o755)
    root = tmp_path / "root"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KILN_ROOT": str(root), "KILN_FETCH_RETRY_DELAY_SECONDS": "0"}
    return {"root": root, "env": env, "calls": calls, "parameter": parameter, "objects": objects, "bundle": bundle}


def _resolve(node: dict, ssm_fails: int = 0) -> subprocess.CompletedProcess:
    env = {**node["env"], "SSM_FAILS": str(ssm_fails)}
    arguments = ["us-west-2", "CFN-NodeBootstrap-abc", "--role", "controller"]
    return subprocess.run(
        ["bash", str(RESOLVE_SCRIPT), *arguments], env=env, capture_output=True, text=True, timeout=60
    )


def _edit_manifest(node: dict, change) -> None:
    manifest = json.loads(node["parameter"].read_text())
    change(manifest)
    node["parameter"].write_text(json.dumps(manifest))


def test_a_parallelcluster_node_resolves_the_current_bootstrap_and_runs_it(pc_node: dict) -> None:
    result = _resolve(pc_node, ssm_fails=2)
    assert result.returncode == 0, result.stderr
    assert (pc_node["root"] / "ran").read_text() == "entry ran with --phase all --role controller\n"
    calls = pc_node["calls"].read_text().splitlines()
    reads = [c for c in calls if c.startswith("ssm")]
    assert (
        reads
        == ["ssm get-parameter --region us-west-2 --name CFN-NodeBootstrap-abc --query Parameter.Value --output text"]
        * 3
    ), "two failed reads, then one that worked"
    assert [c.split()[3] for c in calls if c.startswith("s3")] == ["s3://assets/fetch.sh", "s3://assets/bundle.zip"]
    env = (pc_node["root"] / "etc/kiln/cluster.env").read_text()
    assert "KILN_FSX_DNS='fs-0123.fsx.us-east-1.amazonaws.com'" in env and "KILN_REGION='us-east-1'" in env
    unpacked = pc_node["root"] / "opt/kiln/bootstrap"
    assert os.access(unpacked / "parallelcluster.sh", os.X_OK) and (unpacked / ".hidden").is_file()
    assert (pc_node["root"] / "opt/kiln/fetch.sh").read_bytes() == FETCH_SCRIPT.read_bytes()


def test_a_bundle_whose_content_differs_from_its_digest_is_never_unpacked(pc_node: dict) -> None:
    expected = bundle_digest(pc_node["bundle"])
    (pc_node["bundle"] / "steps" / "a.sh").write_text("echo tampered\n")
    _zip_as_cdk_does(pc_node["bundle"], pc_node["objects"] / "assets" / "bundle.zip")
    result = _resolve(pc_node)
    assert result.returncode == 1
    actual = bundle_digest(pc_node["bundle"])
    assert f"s3://assets/bundle.zip: the bundle's content has sha256 {actual}, expected {expected}" in result.stderr
    assert "the bundle from s3://assets/bundle.zip was not unpacked" in result.stderr
    assert not (pc_node["root"] / "opt/kiln/bootstrap/parallelcluster.sh").exists()
    assert not (pc_node["root"] / "ran").exists()


def test_a_fetch_script_whose_digest_differs_is_never_run(pc_node: dict) -> None:
    _edit_manifest(pc_node, lambda m: m["fetch"].update(sha256="0" * 64))
    result = _resolve(pc_node)
    assert result.returncode == 1
    assert "s3://assets/fetch.sh does not match its sha256 " + "0" * 64 in result.stderr
    assert not (pc_node["root"] / "opt/kiln/fetch.sh").exists()
    assert not (pc_node["root"] / "ran").exists()


def test_a_manifest_without_the_bundles_digest_is_refused(pc_node: dict) -> None:
    """The manifest form as the argument form: no digest, no fetch."""
    _edit_manifest(pc_node, lambda m: m["bundle"].pop("sha256"))
    result = _resolve(pc_node)
    assert result.returncode == 2
    assert "refusing s3://assets/bundle.zip: no sha256 to check it against" in result.stderr
    assert "bundle.zip" not in pc_node["calls"].read_text()
    assert not (pc_node["root"] / "ran").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["bundle"].update(entry_point="../x.sh"), "entry point must be a relative path"),
        (lambda m: m["bundle"].update(sha256="ABC"), "sha256 must be 64 lowercase hex digits"),
        (lambda m: m["bundle"].update(url="https://example.invalid/b.zip"), "bundle URL must be s3://bucket/key"),
        (lambda m: m["env"].update(FSX="x"), "usage:"),
    ],
)
def test_a_bad_manifest_is_refused_before_anything_is_fetched(pc_node: dict, change, message: str) -> None:
    _edit_manifest(pc_node, change)
    result = _resolve(pc_node)
    assert result.returncode == 2 and message in result.stderr
    assert "bundle.zip" not in pc_node["calls"].read_text()


def test_the_digest_is_of_the_content_whoever_zipped_it(tmp_path: Path) -> None:
    """bundle_digest of the directory is what fetch.sh computes from the zip: directory entries, timestamps and
    the zip's maker do not count; content and names do."""
    bundle = _bundle_dir(tmp_path)
    digest = bundle_digest(bundle)
    listing = subprocess.run(
        ["bash", "-c", "find -L . -type f -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum"],
        cwd=bundle,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert digest == hashlib.sha256(listing.encode()).hexdigest()
    (bundle / "steps" / "a.sh").chmod(0o700)
    assert bundle_digest(bundle) == digest
    (bundle / "steps" / "b.sh").write_text("")
    assert bundle_digest(bundle) != digest


def test_the_parallelcluster_scripts_are_shellcheck_clean() -> None:
    result = subprocess.run(
        [str(SHELLCHECK), "-x", str(FETCH_SCRIPT), str(RESOLVE_SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_resolve_bootstrap_is_frozen() -> None:
    assert file_sha256(RESOLVE_SCRIPT) == RESOLVE_SCRIPT_SHA256


def test_fetch_sh_checks_and_unpacks_with_the_one_verified_unpack_program() -> None:
    # fetch.sh ships alone in user data, so it carries the program in a heredoc; the image bake runs the same text.
    script = FETCH_SCRIPT.read_text()
    call = 'python3 - fetch.sh "$archive" "$bundle_dir" "$digest" "$bundle_url" "$entry_point" <<\'PY\'\n'
    start = script.index(call) + len(call)
    assert script[start : script.index("\nPY\n", start) + 1] == VERIFIED_UNPACK
