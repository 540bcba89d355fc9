"""The user's own steps in a baked image: install steps go in (a changed script is a new image bundle) in a component
of their own after kiln's, which installs and verifies them with the bundle's kiln-step; configure steps stay out."""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from pathlib import Path

import pytest
import yaml

from kiln.bootstrap.config import UserStep
from kiln.bootstrap.image_recipe import image_config, read_manifest
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import render_bundle
from kiln.constructs.training_image import component_yaml
from kiln.contracts.image_components import USER_STEP_GROUP, component_documents, step_groups
from kiln.contracts.tags import TAG_PIN_PREFIX
from tests.support.recipes import files, pcs

URI = "s3://cdk-assets-123456789012-us-east-1/0123abcd.zip"
# A bundle content digest (kiln.bootstrap.fetch.bundle_digest); the bake checks the zip against it.
DIGEST = "0" * 64


def user_step(name: str, phase: str, text: str = "echo ready") -> UserStep:
    script = f"#!/bin/bash\n{text}\n".encode()
    return UserStep(name=name, phase=phase, roles=("worker",), script=script, sha256=hashlib.sha256(script).hexdigest())


STEPS = (user_step("tools", "install"), user_step("motd", "configure"), user_step("models", "install"))


def test_the_image_keeps_install_steps_for_every_role_and_drops_configure_ones() -> None:
    config = image_config(pcs(user_steps=STEPS))
    assert [(step.name, step.sha256) for step in config.user_steps] == [
        ("tools", STEPS[0].sha256),
        ("models", STEPS[2].sha256),
    ]
    # The bake runs them for every role PCS's nodes have, whichever they are for.
    assert {step.roles for step in config.user_steps} == {("login", "worker")}


def test_a_change_of_an_install_steps_roles_renders_the_same_image_bundle(tmp_path: Path) -> None:
    plain = render_bundle(image_config(pcs(user_steps=STEPS)), tmp_path / "a").directory
    login = dataclasses.replace(STEPS[0], roles=("login",))
    again = render_bundle(image_config(pcs(user_steps=(login, *STEPS[1:]))), tmp_path / "b").directory
    assert files(plain) == files(again)


def test_a_changed_configure_script_renders_the_same_image_bundle(tmp_path: Path) -> None:
    plain = render_bundle(image_config(pcs(user_steps=STEPS)), tmp_path / "a").directory
    other = (STEPS[0], user_step("motd", "configure", "echo other"), STEPS[2])
    again = render_bundle(image_config(pcs(user_steps=other)), tmp_path / "b").directory
    without = render_bundle(image_config(pcs(user_steps=(STEPS[0], STEPS[2]))), tmp_path / "c").directory
    assert files(plain) == files(again) == files(without)


def test_a_changed_install_script_renders_another_image_bundle(tmp_path: Path) -> None:
    plain = render_bundle(image_config(pcs(user_steps=STEPS)), tmp_path / "a").directory
    other = (user_step("tools", "install", "echo v2"), *STEPS[1:])
    changed = render_bundle(image_config(pcs(user_steps=other)), tmp_path / "b").directory
    assert files(plain) != files(changed)
    assert files(plain)["user-steps/tools"] != files(changed)["user-steps/tools"]


def test_user_install_steps_are_one_group_after_kiln_steps() -> None:
    steps = (*PROFILES["pcs"].install_steps, "user_tools", "user_models")
    groups = step_groups(steps)
    assert groups[-1] == (USER_STEP_GROUP, ("user_tools", "user_models"))
    assert tuple(step for _, members in groups for step in members) == steps
    # Before kiln's own steps, they would run out of bootstrap order: refused.
    with pytest.raises(ValueError, match="the image groups would run them as"):
        step_groups(("user_tools", *PROFILES["pcs"].install_steps))


def test_the_manifest_holds_them_and_their_component_installs_and_verifies_them(tmp_path: Path) -> None:
    bundle = render_bundle(image_config(pcs(user_steps=STEPS)), tmp_path / "b").directory
    manifest = read_manifest(bundle)
    assert manifest.install_steps[-2:] == ("user_tools", "user_models")
    assert manifest.steps["user_tools"] == {"KILN_USER_STEP_TOOLS_SHA256": STEPS[0].sha256}
    # Not as AMI tags: EC2 allows 50 per AMI, and kiln:recipe, a digest of the whole bundle, tells images apart.
    assert not [key for key in manifest.tags() if key.startswith(f"{TAG_PIN_PREFIX}user_step")]
    documents = {
        document.name: yaml.safe_load(component_yaml(document))
        for document in component_documents(bundle_uri=URI, bundle_sha256=DIGEST, install_steps=manifest.install_steps)
    }
    assert list(documents)[-3:] == [USER_STEP_GROUP, "seal", "test"]
    commands = [step["inputs"]["commands"][-1] for step in documents[USER_STEP_GROUP]["phases"][0]["steps"]]
    calls = [shlex.split(command.split("&&")[-1]) for command in commands]
    assert calls == [
        ["KILN_PHASE=bake", "bash", "./kiln-step", "user_tools", "user_models"],
        ["KILN_PHASE=bake", "bash", "./kiln-step", "--verify", "user_tools", "user_models"],
    ]
    # The image's test verifies them again with kiln's.
    test = documents["test"]["phases"][0]["steps"][-1]["inputs"]["commands"][1]
    assert test.split("--verify ")[1].split(" &&")[0].split()[-2:] == ["user_tools", "user_models"]


def test_the_manifest_refuses_an_install_step_that_is_neither_kiln_nor_user(tmp_path: Path) -> None:
    bundle = render_bundle(image_config(pcs()), tmp_path / "b").directory
    env = bundle / "bundle.env"
    env.write_text(env.read_text().replace("KILN_INSTALL_STEPS='", "KILN_INSTALL_STEPS='install_extras "))
    with pytest.raises(ValueError, match="names 'install_extras', which is no declared step nor a user step"):
        read_manifest(bundle)


def test_a_bundle_with_only_configure_steps_bakes_no_user_component(tmp_path: Path) -> None:
    config = image_config(pcs(user_steps=(STEPS[1],)))
    bundle = render_bundle(config, tmp_path / "b").directory
    manifest = read_manifest(bundle)
    assert not [step for step in manifest.install_steps if step.startswith("user_")]
    names = [
        d.name for d in component_documents(bundle_uri=URI, bundle_sha256=DIGEST, install_steps=manifest.install_steps)
    ]
    assert USER_STEP_GROUP not in names
