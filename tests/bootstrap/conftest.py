"""Fixtures for the node bootstrap tests: a rendered bundle, a throwaway root (harness: tests/support/bootstrap.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config
from tests.support.node_root import Node, make_node


@pytest.fixture(scope="session")
def pcs_bundle(tmp_path_factory) -> Path:
    return render_bundle(pcs_config(), tmp_path_factory.mktemp("pcs") / "bundle").directory


@pytest.fixture
def node(tmp_path, pcs_bundle) -> Node:
    return make_node(tmp_path, pcs_bundle)
