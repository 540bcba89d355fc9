"""The Image Builder component documents: they parse, run only the bundle's own scripts, in bootstrap order."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from kiln.bootstrap.config import BootstrapConfig, NodeGroup, SoftwarePins
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import render_bundle
from kiln.constructs.training_image import component_yaml
from kiln.contracts.bundle import VERIFIED_UNPACK
from kiln.contracts.errors import InputError
from kiln.contracts.image_components import BUILD_DIR, BUNDLE_DIR, component_documents, step_groups

URI = "s3://cdk-assets-123456789012-us-east-1/0123abcd.zip"
# A bundle content digest (kiln.bootstrap.fetch.bundle_digest); the bake checks the zip against it.
DIGEST = "0" * 64
CLOUD = [target for target in sorted(PROFILES) if target != "local"]


def documents(target: str) -> list[dict]:
    steps = PROFILES[target].install_steps
    return [
        yaml.safe_load(component_yaml(document))
        for document in component_documents(bundle_uri=URI, bundle_sha256=DIGEST, install_steps=steps)
    ]


def commands(document: dict, phase: str | None = None) -> list[str]:
    found = []
    for each in document["phases"]:
        if phase not in (None, each["name"]):
            continue
        for step in each["steps"]:
            if step["action"] == "ExecuteBash":
                found += step["inputs"]["commands"]
    return found


def kiln_step_calls(document: dict, phase: str | None = None) -> list[list[str]]:
    """Return the argument lists of every kiln-step call in DOCUMENT."""
    calls = []
    for command in commands(document, phase):
        for part in command.split("&&"):
            words = shlex.split(part)
            if "./kiln-step" in words:
                calls.append(words[words.index("./kiln-step") + 1 :])
    return calls


@pytest.mark.parametrize("target", CLOUD)
def test_documents_parse_and_follow_the_bootstrap_order(target: str) -> None:
    parsed = documents(target)
    groups = step_groups(PROFILES[target].install_steps)
    assert [d["name"] for d in parsed] == ["fetch", *(name for name, _ in groups), "seal", "test"]
    for document in parsed:
        assert document["schemaVersion"] == 1.0
        assert all(step["action"] in {"ExecuteBash", "S3Download"} for p in document["phases"] for step in p["steps"])
        assert all(c.startswith("set -euo pipefail") for c in commands(document)[:1])
    installed = [
        argument
        for document in parsed[1:-2]
        for call in kiln_step_calls(document)
        if "--verify" not in call
        for argument in call
    ]
    assert tuple(installed) == PROFILES[target].install_steps


@pytest.mark.parametrize("target", CLOUD)
def test_documents_name_only_steps_and_scripts_the_bundle_has(target: str, tmp_path: Path) -> None:
    # Each target's own image: it brings the EFA software, so kiln pins none.
    config = BootstrapConfig(
        target=target,
        os="al2023" if target in ("eks", "pcs") else "ubuntu2204",
        groups=(NodeGroup(name="gpu", instance_type="p5.48xlarge"),),
        software=SoftwarePins(slurm="25.11"),
    )
    bundle = render_bundle(config, tmp_path / "bundle").directory
    assert (bundle / "kiln-step").is_file()
    for document in documents(target):
        for call in kiln_step_calls(document):
            for argument in call:
                if argument.startswith("--"):
                    assert argument in {"--verify", "--seal"}
                else:
                    assert (bundle / "steps" / f"{argument}.sh").is_file(), argument
        for command in commands(document):
            # Image Builder would read {{ ... }} as its own variables.
            assert "{{" not in command
            for path in re.findall(r"/[\w./-]+", command):
                assert path.startswith((BUILD_DIR, "/")) and ".." not in path


def test_the_bundle_comes_from_the_given_uri_and_every_build_cleans_up() -> None:
    parsed = documents("pcs")
    downloads = [
        step["inputs"] for d in parsed for p in d["phases"] for step in p["steps"] if step["action"] == "S3Download"
    ]
    assert [entry[0]["source"] for entry in downloads] == [URI, URI]
    seal, test = parsed[-2], parsed[-1]
    assert [p["name"] for p in test["phases"]] == ["test"]
    assert kiln_step_calls(seal) == [["--seal"]]
    assert kiln_step_calls(test) == [["--verify", *PROFILES["pcs"].install_steps]]
    assert commands(seal)[-1] == f"rm -rf {BUILD_DIR}" and commands(test)[-1] == f"rm -rf {BUILD_DIR}"
    for document in parsed[1:-2]:
        calls = kiln_step_calls(document, "build")
        assert calls[1] == ["--verify", *calls[0]]
        assert all(f"cd {BUNDLE_DIR}" in c for c in commands(document) if "kiln-step" in c)
        assert all("KILN_PHASE=bake" in c for c in commands(document) if "kiln-step" in c)


def test_token_uris_stay_on_one_line() -> None:
    long_uri = "s3://${Token[TOKEN.123]}/" + "a" * 300 + ".zip"
    text = component_yaml(
        component_documents(bundle_uri=long_uri, bundle_sha256=DIGEST, install_steps=("install_launcher",))[0]
    )
    assert long_uri in text


def test_the_bake_unpacks_only_a_bundle_that_matches_its_digest() -> None:
    (fetch,) = [document for document in documents("pcs") if document["name"] == "fetch"]
    unpack = next(step for step in fetch["phases"][0]["steps"] if step["name"] == "Unpack")
    program = unpack["inputs"]["commands"][1]
    # The very program a booting node runs in fetch.sh, given this bundle's digest and kiln-step as what must be in it.
    assert f" {DIGEST} {URI} kiln-step <<'KILN_VERIFIED_UNPACK'\n{VERIFIED_UNPACK}KILN_VERIFIED_UNPACK" in program
    assert "python3 -m zipfile" not in yaml.safe_dump(fetch)


def test_a_digest_that_is_not_sha256_is_refused() -> None:
    with pytest.raises(InputError, match="bundle_sha256: got 'abc', allowed: 64 lowercase hex digits"):
        component_documents(bundle_uri=URI, bundle_sha256="abc", install_steps=("install_launcher",))
