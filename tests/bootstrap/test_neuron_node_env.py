"""The Slurm node environment of a Trainium cluster (instances/<type>/nccl.env and profile.sh, rendered from the spec):
the Neuron EFA preset, the compile cache's root on FSx (none without Lustre), and launcher.env's names on the types that
read them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from kiln.bootstrap.render import render_bundle
from kiln.catalog import preset_environment
from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "trn1-pcs.yaml"
CACHE_ROOT = "/fsx/neuron-compile-cache"


def _config(**launcher: object):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["launcher"] = {**data.get("launcher", {}), **launcher}
    return config_from_spec(parse_spec(data, str(EXAMPLE)))


def _env(bundle: Path, instance: str) -> dict[str, str]:
    lines = (bundle / "instances" / instance / "nccl.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_a_trainium_node_on_fsx_gets_the_preset_the_cache_and_the_specs_neuron_names(tmp_path: Path) -> None:
    env = {"NEURON_RT_LOG_LEVEL": "INFO", "FI_LOG_LEVEL": "warn"}
    config = _config(env=env)
    assert config.lustre
    bundle = render_bundle(config, tmp_path).directory
    trn1 = _env(bundle, "trn1.32xlarge")
    # The cache's root, never one cache for every node: kiln-launch picks the job's and node's directory under it.
    assert trn1["KILN_NEURON_CACHE_ROOT"] == CACHE_ROOT and "NEURON_COMPILE_CACHE_URL" not in trn1
    assert (trn1["FI_PROVIDER"], trn1["FI_EFA_USE_DEVICE_RDMA"], trn1["FI_EFA_FORK_SAFE"]) == ("efa", "1", "1")
    assert (trn1["NEURON_RT_LOG_LEVEL"], trn1["FI_LOG_LEVEL"]) == ("INFO", "warn")
    # A Slurm node is no container: the pod variables (CCOM_SOCKET_IFNAME=eth0) stay out.
    assert "CCOM_SOCKET_IFNAME" not in trn1 and "NEURON_RT_RESET_CORES" not in trn1
    assert trn1 == preset_environment("trn1.32xlarge", overrides=env, shared_cache=True)
    profile = (bundle / "instances/trn1.32xlarge/profile.sh").read_text()
    assert f"export KILN_NEURON_CACHE_ROOT='{CACHE_ROOT}'" in profile and "NEURON_COMPILE_CACHE_URL" not in profile
    # The login node's type reads no Neuron variable: it gets libfabric's, not the Neuron ones.
    login = _env(bundle, "m5.2xlarge")
    assert login["FI_LOG_LEVEL"] == "warn"
    assert not any(name.startswith(("NEURON_", "CCOM_")) for name in login)


def test_the_cache_follows_lustre_and_without_it_neurons_node_local_default_stays(tmp_path: Path) -> None:
    with_lustre = _env(render_bundle(_config(), tmp_path / "fsx").directory, "trn1.32xlarge")
    config = dataclasses.replace(_config(), lustre=False, lustre_efa=False)
    without = _env(render_bundle(config, tmp_path / "none").directory, "trn1.32xlarge")
    assert with_lustre.pop("KILN_NEURON_CACHE_ROOT") == CACHE_ROOT
    # Nothing else changes: Neuron keeps /var/tmp/neuron-compile-cache on the node's own disk.
    assert without == with_lustre and "NEURON_CC_FLAGS" not in without


def test_the_users_own_cache_dir_replaces_kilns(tmp_path: Path) -> None:
    bundle = render_bundle(_config(env={"NEURON_CC_FLAGS": "--cache_dir=/fsx/team-cache"}), tmp_path).directory
    trn1 = _env(bundle, "trn1.32xlarge")
    assert trn1["NEURON_CC_FLAGS"] == "--cache_dir=/fsx/team-cache"
    assert "NEURON_COMPILE_CACHE_URL" not in trn1 and "KILN_NEURON_CACHE_ROOT" not in trn1
