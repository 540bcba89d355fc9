"""A Trainium node of a Slurm target names its Neuron release's training container to kiln-launch; a GPU node does
not (kiln.launcher.container runs the launcher in it with enroot)."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.bootstrap.checks import BootstrapInputError
from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import render_bundle
from kiln.catalog.envfile import parse_env_file
from kiln.catalog.neuron import neuron_release, resolve_neuron_release
from kiln.catalog.platforms import image_profile, image_profile_for
from tests.support.bootstrap import pcs_config, pins_beside
from tests.support.node_root import CLUSTER_ENV, make_node, simulate_image
from tests.support.paths import ROOT

TRN1, P5 = "trn1.32xlarge", "p5.48xlarge"
GROUPS = (
    NodeGroup(name="trn1", instance_type=TRN1, max_count=2),
    NodeGroup(name="gpu", instance_type=P5, max_count=2),
)


def trainium_pcs_config(**changes):
    """trn1-pcs as the example deploys it (PCS's sample AMI on Amazon Linux 2023), plus a GPU group."""
    release = resolve_neuron_release(None, [TRN1])
    pins = dataclasses.replace(pins_beside("pcs-sample", "al2023"), neuron=release)
    settings = {"image": "pcs-sample", "os": "al2023", "groups": GROUPS, "software": pins, "exporters": ("node",)}
    return pcs_config(**(settings | changes))


@pytest.fixture(scope="module")
def trainium_bundle(tmp_path_factory) -> Path:
    return render_bundle(trainium_pcs_config(), tmp_path_factory.mktemp("trn1") / "bundle").directory


def launcher_env(tmp_path: Path, bundle: Path, instance: str) -> dict[str, str]:
    """Boot a node of BUNDLE as INSTANCE on the PCS sample AMI, run configure_training_env, and return launcher.env
    as a job's shell reads it (set -a; source)."""
    node = make_node(tmp_path, bundle, cluster_env={**CLUSTER_ENV, "KILN_INSTANCE_TYPE": instance})
    simulate_image(node, "pcs-sample", "al2023")
    result = node.run("configure_training_env")
    assert result.returncode == 0, result.stderr
    path = node.root / "etc/kiln/launcher.env"
    script = f"set -a; source {shlex.quote(str(path))}; env -0"
    shown = subprocess.run(["bash", "-c", script], env={}, capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in shown.split("\0") if item.startswith("KILN_"))


def test_a_trainium_node_names_the_training_container_of_its_neuron_release(tmp_path, trainium_bundle):
    expected = neuron_release(resolve_neuron_release(None, [TRN1])).training_image
    assert expected and expected.startswith("public.ecr.aws/neuron/pytorch-training-neuronx:")
    assert launcher_env(tmp_path, trainium_bundle, TRN1)["KILN_TRAINING_IMAGE"] == expected


def test_a_gpu_node_of_the_same_bundle_trains_on_its_host(tmp_path, trainium_bundle):
    got = launcher_env(tmp_path, trainium_bundle, P5)
    assert "KILN_TRAINING_IMAGE" not in got
    assert got["KILN_CHECKPOINT_DIR"] == "/fsx/checkpoints"


def test_trainium_nodes_install_enroot_for_it(trainium_bundle):
    values = parse_env_file((trainium_bundle / "bundle.env").read_text())
    # The PCS sample AMI lists no enroot (platforms.json): kiln builds its pinned one.
    assert values["KILN_CONTAINERS"] == "1"
    assert values["KILN_ENROOT_VERSION"] and not values["KILN_IMAGE_ENROOT"]


@pytest.mark.parametrize("target", ["parallelcluster", "hyperpod"])
def test_every_slurm_backends_trainium_nodes_get_it(target):
    # Neither ParallelCluster's official AMI nor HyperPod's Slurm AMI lists Neuron's PyTorch (platforms.json images).
    image = image_profile_for(target)
    assert not {"torch", "torch_neuronx"} & set(image_profile(image).owned_on("ubuntu2204"))
    release = resolve_neuron_release(None, [TRN1])
    pins = dataclasses.replace(pins_beside(image, "ubuntu2204"), neuron=release)
    config = pcs_config(target=target, groups=GROUPS, software=pins, exporters=("node",))
    assert config.training_image == neuron_release(release).training_image


def test_no_training_container_without_neuron_devices_or_off_slurm():
    assert pcs_config().training_image == ""
    # EKS pods name their own image (kiln job submit --image).
    assert pcs_config(target="eks", groups=GROUPS, exporters=()).training_image == ""


def test_containers_off_is_refused_where_the_launcher_needs_one():
    with pytest.raises(
        BootstrapInputError, match=r"software.containers: got false, but kiln-launch on the Neuron nodes"
    ):
        trainium_pcs_config(containers=False)


def test_kiln_validate_refuses_containers_off_on_trainium_slurm_in_one_line(tmp_path):
    spec = (ROOT / "examples/trn1-pcs.yaml").read_text().replace("software:\n", "software:\n  containers: false\n", 1)
    assert "containers: false" in spec
    path = tmp_path / "cluster.yaml"
    path.write_text(spec)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "kiln"), "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        "software.containers: got false, but kiln-launch on the Neuron nodes runs in the training container" in lines[0]
    )


def test_container_storage_records_the_image_cache_on_local_disk(tmp_path, trainium_bundle):
    node = make_node(tmp_path, trainium_bundle, cluster_env={**CLUSTER_ENV, "KILN_INSTANCE_TYPE": TRN1})
    simulate_image(node, "pcs-sample", "al2023")
    result = node.run("configure_container_storage")
    assert result.returncode == 0, result.stderr
    record = (node.root / "etc/kiln/container-cache").read_text().strip()
    assert record == "/scratch/kiln-containers"
    assert (node.root / record.lstrip("/")).stat().st_mode & 0o7777 == 0o1777
