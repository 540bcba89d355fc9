"""The lock file: downloaded once over HTTP, hashed, written beside the spec, read back strictly, enforced."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kiln.bootstrap import lock
from kiln.bootstrap.artifacts import Artifact, lockable_artifacts
from kiln.bootstrap.lock import LockedFile, LockError, lock_text, plan_lock, read_lock
from kiln.cli.main import main
from kiln.node_config.judge import load_and_judge
from kiln.node_config.translate import config_from_spec
from kiln.spec import load_spec
from tests.support.paths import ROOT
from tests.support.servers import loopback_server

# The test spec installs an EFA installer release AWS publishes no digest for: the one download kiln cannot check
# without a lock.
FILES = {"aws-efa-installer-1.47.0.tar.gz": b"src"}


class _Files(http.server.BaseHTTPRequestHandler):
    """Serve FILES by base name on loopback, as GitHub serves release assets, and count requests."""

    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        type(self).requests.append(self.path)
        body = FILES.get(self.path.rsplit("/", 1)[-1])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Files.requests = []
    with loopback_server(_Files) as url:
        yield url


@pytest.fixture
def via_loopback(server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Send the lock's downloads to the loopback server, through the real download code."""
    real = lock.download_digest
    monkeypatch.setattr(lock, "download_digest", lambda url: real(f"{server}/{url.rsplit('/', 1)[-1]}"))
    return server


def _spec(tmp_path: Path, *, lock_file: bool = True, name: str = "cluster") -> Path:
    """Write the quickstart on an AMI of the user's own (base: own), with that EFA release and a lock file. Its GPU
    nodes are static, so their setup at boot is not held to PCS's deadline for nodes that scale from zero."""
    document = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    document["compute"]["image"] = {"base": "own", "ami_id": "ami-0123456789abcdef0"}
    document["compute"]["groups"][0]["min_count"] = document["compute"]["groups"][0]["max_count"]
    document["software"] = {"efa_installer": "1.47.0"} | ({"lock_file": "quickstart.lock.json"} if lock_file else {})
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(document))
    return spec


def test_download_digest_streams_and_hashes(server: str) -> None:
    digest, size = lock.download_digest(f"{server}/aws-efa-installer-1.47.0.tar.gz")
    assert (digest, size) == (hashlib.sha256(b"src").hexdigest(), 3)


def test_a_failed_download_is_one_lock_error(server: str) -> None:
    with pytest.raises(LockError, match=r"/missing.deb: download failed \(HTTP Error 404"):
        lock.download_digest(f"{server}/missing.deb")


def test_lock_command_writes_the_spec_lock_and_makes_the_example_boot_ready(
    tmp_path: Path, via_loopback: str, capsys: pytest.CaptureFixture
) -> None:
    spec = _spec(tmp_path)
    assert not load_and_judge(str(spec))[1].ready
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 0
    out, err = capsys.readouterr()
    written = tmp_path / "quickstart.lock.json"
    assert out.strip() == str(written)
    entries = {entry.name: entry for entry in read_lock(written)}
    assert set(entries) == {"efa-installer"}
    efa = entries["efa-installer"]
    assert efa.url == "https://efa-installer.amazonaws.com/aws-efa-installer-1.47.0.tar.gz"
    assert efa.sha256 == hashlib.sha256(b"src").hexdigest() and efa.size_bytes == 3
    assert "efa-installer 1.47.0: " + hashlib.sha256(b"src").hexdigest() in err
    assert load_and_judge(str(spec))[1].ready
    config = config_from_spec(load_spec(spec))
    assert all(config.locked[a.url] == entries[a.name].sha256 for a in lockable_artifacts(config))


def test_a_second_lock_downloads_nothing_and_writes_the_same_text(tmp_path: Path, via_loopback: str) -> None:
    spec = _spec(tmp_path)
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 0
    first = (tmp_path / "quickstart.lock.json").read_text()
    requests = len(_Files.requests)
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 0
    assert len(_Files.requests) == requests
    assert (tmp_path / "quickstart.lock.json").read_text() == first


def test_refresh_stops_when_a_published_file_changed_and_keeps_the_lock(
    tmp_path: Path, via_loopback: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path)
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 0
    before = (tmp_path / "quickstart.lock.json").read_text()
    monkeypatch.setitem(FILES, "aws-efa-installer-1.47.0.tar.gz", b"changed upstream")
    capsys.readouterr()
    assert main(["bootstrap", "lock", "--refresh", "--spec", str(spec)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "aws-efa-installer-1.47.0.tar.gz: sha256 is now" in line and "the published file changed" in line
    assert (tmp_path / "quickstart.lock.json").read_text() == before


def test_a_download_failure_writes_nothing(tmp_path: Path, via_loopback: str, monkeypatch, capsys) -> None:
    spec = _spec(tmp_path)
    monkeypatch.delitem(FILES, "aws-efa-installer-1.47.0.tar.gz")
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 1
    assert "download failed" in capsys.readouterr().err
    assert not (tmp_path / "quickstart.lock.json").exists()


def test_a_spec_without_a_lock_file_is_told_what_to_add(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = _spec(tmp_path, lock_file=False, name="mine")
    assert main(["bootstrap", "lock", "--spec", str(spec)]) == 2
    assert "software.lock_file: not set; add lock_file: mine.lock.json under software" in capsys.readouterr().err


def test_plan_keeps_known_entries_downloads_new_ones_and_drops_the_rest() -> None:
    needed = [
        Artifact(name="pyxis", version="0.21.0", url="https://x.example/v0.21.0.tar.gz", sha256="", published=False)
    ]
    old = LockedFile(
        name="pyxis", version="0.20.0", url="https://x.example/v0.20.0.tar.gz", sha256="a" * 64, size_bytes=1
    )
    plan = plan_lock(needed, [old], fetch=lambda url: ("b" * 64, 7))
    assert [(e.version, e.sha256, e.size_bytes) for e in plan.entries] == [("0.21.0", "b" * 64, 7)]
    assert plan.notes[-1] == "pyxis 0.20.0: dropped (no longer needed)"


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ("not json", "not JSON"),
        ('{"kiln_lock": 2, "artifacts": []}', "not a kiln lock"),
        ('{"kiln_lock": 1, "artifacts": [{"name": "pyxis"}]}', "artifacts[0]: must have exactly"),
        (
            {"name": "nvidia-drivers", "version": "1", "url": "https://x/y", "sha256": "a" * 64, "size_bytes": 1},
            "artifacts[0]: name: got 'nvidia-drivers'",
        ),
        ({"name": "pyxis", "version": "1", "url": "http://x/y", "sha256": "a" * 64, "size_bytes": 1}, "url: got"),
        ({"name": "pyxis", "version": "1", "url": "https://x/y", "sha256": "A" * 64, "size_bytes": 1}, "sha256: got"),
        ({"name": "pyxis", "version": "1;id", "url": "https://x/y", "sha256": "a" * 64, "size_bytes": 1}, "version"),
        ({"name": "pyxis", "version": "1", "url": "https://x/y", "sha256": "a" * 64, "size_bytes": True}, "size"),
    ],
)
def test_a_bad_lock_is_refused_with_one_line_naming_the_file(tmp_path: Path, document, words: str) -> None:
    path = tmp_path / "cluster.lock.json"
    if isinstance(document, dict):
        document = json.dumps({"kiln_lock": 1, "about": "", "artifacts": [document]})
    path.write_text(document)
    with pytest.raises(LockError, match=words.replace("[", r"\[").replace("(", r"\(")) as caught:
        read_lock(path)
    assert str(caught.value).startswith(str(path))


def test_a_bad_lock_named_by_a_spec_is_a_spec_error_on_lock_file(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    (tmp_path / "quickstart.lock.json").write_text("{}")
    assert main(["validate", str(spec)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{spec}:") and "software.lock_file:" in line and "not a kiln lock" in line


def test_lock_text_round_trips_sorted() -> None:
    entries = [
        LockedFile(name="pyxis", version="0.20.0", url="https://x/p", sha256="a" * 64, size_bytes=1),
        LockedFile(name="efa-installer", version="1.47.0", url="https://x/e", sha256="b" * 64, size_bytes=2),
    ]
    document = json.loads(lock_text(entries))
    assert [e["name"] for e in document["artifacts"]] == ["efa-installer", "pyxis"]
    assert lock_text(reversed(entries)) == lock_text(entries)


# Deep nesting: Python's JSON decoder recurses per level and ends in RecursionError past about a thousand.
DEEP_LOCKS = {
    "1100-lists": "[" * 1100 + "]" * 1100,  # the audit's 2.2 KB file
    "1100-objects": '{"a": ' * 1100 + "1" + "}" * 1100,
    "inside-a-lock": '{"kiln_lock": 1, "about": "", "artifacts": [' + "[" * 1100 + "]" * 1100 + "]}",
    "never-closed": "[" * 100_000,
}


@pytest.mark.parametrize("text", DEEP_LOCKS.values(), ids=DEEP_LOCKS)
def test_a_deeply_nested_lock_is_one_lock_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cluster.lock.json"
    path.write_text(text)
    with pytest.raises(LockError) as caught:
        read_lock(path)
    assert str(caught.value) == (
        f"{path}: nests deeper than {lock.MAX_LOCK_DEPTH} levels; not a kiln lock (format {lock.LOCK_FORMAT} nests 3)"
    )


def test_the_depth_limit_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "cluster.lock.json"
    inner = lock.MAX_LOCK_DEPTH - 2  # the document and its artifacts list are two levels
    path.write_text('{"kiln_lock": 1, "about": "", "artifacts": [' + "[" * inner + "]" * inner + "]}")
    with pytest.raises(LockError, match=r"artifacts\[0\]: must have exactly"):
        read_lock(path)
    path.write_text('{"kiln_lock": 1, "about": "", "artifacts": [' + "[" * (inner + 1) + "]" * (inner + 1) + "]}")
    with pytest.raises(LockError, match=f"nests deeper than {lock.MAX_LOCK_DEPTH} levels"):
        read_lock(path)


def test_brackets_and_escaped_quotes_inside_strings_do_not_nest(tmp_path: Path) -> None:
    entry = LockedFile(name="pyxis", version="0.20.0", url="https://x/" + "[{" * 50, sha256="a" * 64, size_bytes=1)
    document = json.loads(lock_text([entry]))
    document["about"] = '\\"[[[[' * 50 + '"{{{{'  # an escaped quote does not end the string
    path = tmp_path / "cluster.lock.json"
    path.write_text(json.dumps(document))
    assert read_lock(path) == (entry,)


def test_a_recursion_error_while_decoding_is_one_lock_error(tmp_path: Path, monkeypatch) -> None:
    # The depth check keeps the decoder far from Python's limit; without it, the backstop still answers in one line.
    monkeypatch.setattr(lock, "MAX_LOCK_DEPTH", 10**9)
    path = tmp_path / "cluster.lock.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LockError, match=r"nests too deeply to read; not a kiln lock$"):
        read_lock(path)


def test_a_deep_lock_named_by_a_spec_is_one_line_in_validate(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path)
    (tmp_path / "quickstart.lock.json").write_text(DEEP_LOCKS["1100-lists"])
    assert main(["validate", str(spec)]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert line.startswith(f"{spec}: software.lock_file: ") and "nests deeper than 16 levels" in line
    assert "Traceback" not in out + err


def test_a_lock_that_is_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "cluster.lock.json"
    os.mkfifo(path)
    with pytest.raises(LockError, match="not a regular file"):
        read_lock(path)


def test_a_huge_value_in_a_lock_is_echoed_briefly(tmp_path: Path) -> None:
    entry = {"name": "x" * 500_000, "version": "1", "url": "https://x/y", "sha256": "a" * 64, "size_bytes": 1}
    path = tmp_path / "cluster.lock.json"
    path.write_text(json.dumps({"kiln_lock": 1, "about": "", "artifacts": [entry]}))
    with pytest.raises(LockError) as caught:
        read_lock(path)
    assert f"name: got {'x' * 80!r}... (500000 characters), allowed: " in str(caught.value)
    assert len(str(caught.value)) < len(str(path)) + 400
