"""Boot readiness: a node is ready only when every file it downloads has a digest to check."""

from __future__ import annotations

import dataclasses

from kiln.bootstrap.artifacts import bundle_artifacts
from kiln.bootstrap.readiness import boot_readiness
from tests.support.bootstrap import local_config, pcs_config


def test_files_without_a_digest_make_the_target_not_ready_in_one_line_with_the_one_step():
    config = pcs_config(locked={})
    readiness = boot_readiness(config, remedy="run the lock")
    missing = {a.name for a in bundle_artifacts(config) if not a.verifiable}
    # enroot and pyxis are anchored by their commits: only files with neither digest nor signature remain.
    assert missing == {"efa-installer", "node-exporter"}
    assert not readiness.ready and {a.name for a in readiness.unverifiable} == missing
    [reason] = readiness.reasons()
    assert reason.startswith("not boot-ready: pcs nodes would refuse efa-installer 1.43.2, node-exporter 1.9.0 ")
    assert "(install_efa, install_exporters; no published sha256)" in reason
    assert reason.endswith(": run the lock")


def test_locked_digests_make_it_ready():
    config = pcs_config(locked={})
    locked = {a.url: "b" * 64 for a in bundle_artifacts(config) if not a.sha256}
    ready = boot_readiness(dataclasses.replace(config, locked=locked))
    assert ready.ready and ready.reasons() == []


def test_the_local_target_downloads_nothing_and_is_ready():
    assert boot_readiness(local_config()).ready
