"""The image check: each install step's marker on the node against the pins of the bundle it booted with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.launcher.check import FAILED, INFORMATIONAL, NOT_APPLICABLE, PASSED, CheckResult, screen
from kiln.launcher.image import BUNDLE_PINS, IMAGE_DIR, ImageScan, root_of, scan_image
from tests.support.launcher import cpu_node, run_launcher

# What a PCS bundle wants of three of its install steps, as the bootstrap writes it at boot.
WANTED = {
    "install_efa": {"KILN_EFA_INSTALLER_VERSION": "1.43.2", "KILN_IMAGE_DEVICES": "gpu nvswitch efa"},
    "install_neuron": {"KILN_NEURON_VERSION": "2.29.1", "KILN_NEURON_PACKAGES": ""},
    "install_lustre_client": {"KILN_LUSTRE": "1"},
}


def write_env(path: Path, values: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}='{value}'\n" for name, value in values.items()))


def node_root(tmp_path: Path, markers: dict[str, dict[str, str]], wanted: dict[str, dict[str, str]] | None) -> Path:
    """Return a node root holding MARKERS under /etc/kiln/image and, unless None, WANTED as bundle-pins.env."""
    root = tmp_path / "node"
    for step, pins in markers.items():
        write_env(root / IMAGE_DIR.lstrip("/") / f"{step}.env", pins)
    if wanted is not None:
        values = {"KILN_INSTALL_STEPS": " ".join(wanted)}
        for step, pins in wanted.items():
            values[f"KILN_PINS_{step.upper()}"] = " ".join(pins)
            values.update(pins)
        write_env(root / BUNDLE_PINS.lstrip("/"), values)
    root.mkdir(exist_ok=True)
    return root


def judged(root: Path) -> CheckResult:
    """Return the image check of the node under ROOT, as the screen gives it."""
    return next(
        r for r in screen(None, cpu_node(image=scan_image(root)), "no instance type known") if r.name == "image"
    )


def test_a_node_whose_every_step_matches_passes(tmp_path):
    result = judged(node_root(tmp_path, WANTED, WANTED))
    assert result.status == PASSED
    assert result.detail == f"3 install step(s) match the bundle's pins ({tmp_path}/node/etc/kiln/image)"
    assert result.data["steps"] == sorted(WANTED)


def test_a_pin_the_image_holds_otherwise_fails_naming_step_variable_and_both_values(tmp_path):
    image = {**WANTED, "install_efa": {**WANTED["install_efa"], "KILN_EFA_INSTALLER_VERSION": "1.42.0"}}
    result = judged(node_root(tmp_path, image, WANTED))
    assert result.status == FAILED
    assert result.detail.startswith(
        "install_efa: KILN_EFA_INSTALLER_VERSION is '1.42.0' on the image, the bundle wants '1.43.2'"
    )
    assert result.detail.endswith("rebuild the image: kiln ami build --spec SPEC")
    assert result.data["mismatches"] == [
        {"step": "install_efa", "variable": "KILN_EFA_INSTALLER_VERSION", "image": "1.42.0", "wanted": "1.43.2"}
    ]


def test_a_pin_the_marker_lacks_and_a_missing_marker_both_fail(tmp_path):
    image = {"install_efa": {"KILN_EFA_INSTALLER_VERSION": "1.43.2"}, "install_neuron": WANTED["install_neuron"]}
    result = judged(node_root(tmp_path, image, WANTED))
    assert result.status == FAILED
    assert "install_lustre_client: no marker " in result.detail
    assert (
        "install_efa: KILN_IMAGE_DEVICES is nothing on the image, the bundle wants 'gpu nvswitch efa'" in result.detail
    )
    assert result.data["missing"] == ["install_lustre_client"]


def test_markers_of_steps_the_bundle_does_not_have_are_no_concern(tmp_path):
    image = {**WANTED, "install_slurm": {"KILN_SLURM_SOURCE": "distro"}}
    assert judged(node_root(tmp_path, image, WANTED)).status == PASSED


def test_a_node_without_a_kiln_manifest_is_not_applicable(tmp_path):
    result = judged(node_root(tmp_path, {}, None))
    assert result.status == NOT_APPLICABLE
    assert result.detail == f"no kiln image manifest on this node ({tmp_path}/node/etc/kiln/image)"
    assert by_name(screen(None, cpu_node(), "no instance type known"))["image"] == NOT_APPLICABLE


def test_markers_without_the_bundle_pins_are_informational(tmp_path):
    result = judged(node_root(tmp_path, WANTED, None))
    assert result.status == INFORMATIONAL
    assert "3 install step marker(s)" in result.detail


def test_a_damaged_marker_fails_with_its_line(tmp_path):
    root = node_root(tmp_path, WANTED, WANTED)
    (root / "etc/kiln/image/install_efa.env").write_text("KILN_EFA_INSTALLER_VERSION='1.43.2'\n$(reboot)\n")
    result = judged(root)
    assert result.status == FAILED
    assert "install_efa.env:2: expected KILN_NAME='value', got: $(reboot)" in result.detail


def test_the_root_is_where_the_bootstrap_put_the_node_files():
    assert root_of({}) == Path("/")
    assert root_of({"KILN_ROOT": "/var/lib/kiln-local"}) == Path("/var/lib/kiln-local")
    assert ImageScan().wanted is None


def by_name(results) -> dict[str, str]:
    return {r.name: r.status for r in results}


@pytest.mark.slow
def test_check_json_reports_the_image_of_the_node_under_kiln_root(tmp_path):
    image = {**WANTED, "install_lustre_client": {"KILN_LUSTRE": "0"}}
    root = node_root(tmp_path, image, WANTED)
    done = run_launcher(
        ["--nproc-per-node", "2", "check", "--json", "--max-bytes", "4096"], env={"KILN_ROOT": str(root)}
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    check = next(c for c in report["checks"] if c["name"] == "image")
    assert check["status"] == FAILED
    assert "install_lustre_client: KILN_LUSTRE is '0' on the image, the bundle wants '1'" in check["detail"]
    assert report["facts"]["image"]["markers"]["install_lustre_client"] == {"KILN_LUSTRE": "0"}
