"""Boot readiness: a node is ready only when every download it makes has a digest to check."""

from __future__ import annotations

import dataclasses

from kiln.bootstrap.artifacts import bundle_artifacts
from kiln.bootstrap.readiness import boot_readiness
from tests.bootstrap.conftest import pcs_config
from tests.bootstrap.test_render import local_config


def test_a_download_without_a_digest_makes_the_target_not_ready_and_names_the_step():
    config = pcs_config(checksums={})
    readiness = boot_readiness(config)
    missing = {a.name for a in bundle_artifacts(config) if not a.sha256}
    assert missing and not readiness.ready
    assert {a.name for a in readiness.unverifiable} == missing
    for artifact, reason in zip(readiness.unverifiable, readiness.reasons(), strict=True):
        assert reason.startswith("not boot-ready: install_")
        assert f"would refuse {artifact.name} {artifact.version}" in reason
        assert reason.endswith(f"set software.checksums.{artifact.name}")


def test_digests_from_the_spec_make_it_ready():
    config = pcs_config(checksums={})
    sums = {a.name: "b" * 64 for a in bundle_artifacts(config) if not a.sha256}
    ready = boot_readiness(dataclasses.replace(config, checksums=sums))
    assert ready.ready and ready.reasons() == []


def test_the_local_target_downloads_nothing_and_is_ready():
    assert boot_readiness(local_config()).ready
