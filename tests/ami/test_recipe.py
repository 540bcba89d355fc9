"""The install-only view of a config, the step groups, and the manifest a rendered bundle promises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kiln.bootstrap.config import ClusterUser, NodeGroup
from kiln.bootstrap.image_recipe import image_config, read_manifest
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import render_bundle
from kiln.bootstrap.steps import STEPS
from kiln.contracts.image import pin_tag
from kiln.contracts.image_components import STEP_GROUPS, step_groups
from kiln.contracts.tags import TAG_ARCHITECTURE, TAG_OS, TAG_TARGET
from tests.support.bootstrap import PINS
from tests.support.recipes import files, pcs


def test_every_install_step_is_in_exactly_one_group() -> None:
    grouped = [step for _, steps in STEP_GROUPS for step in steps]
    installs = [name for name, step in STEPS.items() if step.phase == "install"]
    assert sorted(grouped) == sorted(installs)
    assert len(grouped) == len(set(grouped))


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_groups_keep_every_profile_in_bootstrap_order(target: str) -> None:
    steps = PROFILES[target].install_steps
    groups = step_groups(steps)
    assert tuple(step for _, members in groups for step in members) == steps
    assert all(members for _, members in groups)


def test_groups_refuse_an_order_they_would_change() -> None:
    with pytest.raises(ValueError, match="would run them as install_efa install_launcher"):
        step_groups(("install_launcher", "install_efa"))


def test_configure_only_changes_render_the_same_image_bundle(tmp_path: Path) -> None:
    plain = render_bundle(image_config(pcs()), tmp_path / "a").directory
    configured = pcs(
        nccl_env={"NCCL_DEBUG": "INFO"},
        users=(ClusterUser(name="alice", uid=2001),),
        hugepages_2m=5128,
        checkpoint_dir="/fsx/elsewhere",
        # Other group names, sizes and order; the same instance types.
        groups=(NodeGroup(name="big", instance_type="p5.48xlarge", max_count=16),),
        service_instance_types=("m5.8xlarge", "p5.48xlarge"),
    )
    again = render_bundle(image_config(configured), tmp_path / "b").directory
    assert files(plain) == files(again)


@pytest.mark.parametrize(
    "change",
    [
        {"software": dataclasses.replace(PINS, efa_installer="1.44.0")},
        {"software": dataclasses.replace(PINS, nvidia_driver="580.65.06")},
        {"lustre": False},
        {"groups": (NodeGroup(name="gpu", instance_type="p4d.24xlarge"),)},
    ],
    ids=["efa", "driver", "lustre", "instance-type"],
)
def test_install_changes_render_another_image_bundle(tmp_path: Path, change: dict) -> None:
    plain = render_bundle(image_config(pcs()), tmp_path / "a").directory
    changed = render_bundle(image_config(pcs(**change)), tmp_path / "b").directory
    assert files(plain) != files(changed)


def test_image_config_keeps_what_install_steps_read() -> None:
    config = image_config(pcs(users=(ClusterUser(name="alice", uid=2001),), nccl_env={"NCCL_DEBUG": "INFO"}))
    assert config.software == PINS
    assert config.lustre and config.containers
    assert config.instance_types == ("m5.8xlarge", "p5.48xlarge")
    assert (config.users, config.nccl_env) == ((), {})


def test_manifest_lists_each_install_step_with_its_pins(tmp_path: Path) -> None:
    bundle = render_bundle(image_config(pcs()), tmp_path / "b").directory
    manifest = read_manifest(bundle)
    assert manifest.install_steps == PROFILES["pcs"].install_steps
    assert manifest.steps["install_efa"]["KILN_EFA_INSTALLER_VERSION"] == "1.43.2"
    assert manifest.steps["install_nvidia_driver"]["KILN_NVIDIA_DRIVER_VERSION"] == "570.172.08"
    # p5 has GPUs behind NVSwitch and EFA: the image holds what those devices need.
    assert manifest.steps["install_efa"]["KILN_IMAGE_DEVICES"] == "gpu nvswitch efa"
    for step, pins in manifest.steps.items():
        assert set(pins) == set(STEPS[step].pins)
    tags = manifest.tags()
    assert tags[TAG_TARGET] == "pcs" and tags[TAG_OS] == "ubuntu2204" and tags[TAG_ARCHITECTURE] == "x86_64"
    assert tags[pin_tag("KILN_NCCL_VERSION")] == "2.27.3-1+cuda12.9"
    assert len(tags[pin_tag("KILN_LAUNCHER_WHEEL_SHA256")]) == 64


def test_manifest_refuses_a_bundle_without_pins(tmp_path: Path) -> None:
    bundle = render_bundle(image_config(pcs()), tmp_path / "b").directory
    env = bundle / "bundle.env"
    env.write_text(
        "".join(line for line in env.read_text().splitlines(keepends=True) if "PINS_INSTALL_EFA" not in line)
    )
    with pytest.raises(ValueError, match="no KILN_PINS_INSTALL_EFA for install step install_efa"):
        read_manifest(bundle)


def test_pin_tags_name_bundle_variables_only() -> None:
    assert pin_tag("KILN_EFA_INSTALLER_VERSION") == "kiln:pin:efa_installer_version"
    with pytest.raises(ValueError, match="a KILN_ bundle variable"):
        pin_tag("EFA_VERSION")
