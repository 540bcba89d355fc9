"""FSx for Lustre over EFA: LNet gets the node's EFA interfaces as FSx's client guide describes, before the mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.bootstrap.render import render_bundle
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, _efa_devices, _lnet_calls, make_node


@pytest.fixture(scope="module")
def efa_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_bundle(pcs_config(lustre_efa=True), tmp_path_factory.mktemp("efa") / "bundle").directory


def test_a_p5_gives_lnet_every_fourth_of_its_32_efa_devices_then_mounts(tmp_path: Path, efa_bundle: Path) -> None:
    node = make_node(tmp_path, efa_bundle)
    _efa_devices(node, 32)
    result = node.run("configure_fsx")
    assert result.returncode == 0, result.stderr
    calls = _lnet_calls(node)
    added = [c.split("--if ")[1] for c in calls if c.startswith("lnetctl net add --net efa")]
    assert added == [f"rdmap{i:02d}s0 --peer-credits 32" for i in range(0, 32, 4)]
    assert calls[:5] == [
        "modprobe lnet",
        "modprobe kefalnd ipif_name=ens5",
        "modprobe ksocklnd",
        "lnetctl lnet configure",
        "lnetctl net add --net tcp --if ens5",
    ]
    assert calls[-3:] == ["lnetctl set discovery 1", "lnetctl udsp add --src efa --priority 0", "modprobe lustre"]
    # The mount itself stays @tcp: LNet routes it over EFA.
    mounts = [c for c in node.calls() if c.startswith("mount ")]
    assert mounts == [
        "mount -t lustre -o relatime,flock fs-0123.fsx.us-east-1.amazonaws.com@tcp:/abcdef " + str(node.root / "fsx")
    ]
    # A second run finds LNet already on EFA and the file system mounted: nothing changes.
    calls_before = len(node.calls())
    assert node.run("configure_fsx").returncode == 0
    assert node.mutating_calls(since=calls_before) == []


def test_an_ubuntu_kernel_older_than_fsx_allows_stops_the_step(tmp_path: Path, efa_bundle: Path) -> None:
    node = make_node(tmp_path, efa_bundle)
    _efa_devices(node, 32)
    result = node.run("configure_fsx", SHIM_KERNEL="5.15.0-1066-aws")
    assert result.returncode != 0
    assert "FAILED: step configure_fsx" in result.stderr
    assert (
        "FSx for Lustre over EFA needs kernel 6.8 or newer on ubuntu2204 (this node runs 5.15.0-1066-aws): boot a "
        "newer image, or set storage.lustre.efa: false"
    ) in node.log.read_text()
    assert _lnet_calls(node) == [] and not any(c.startswith("mount ") for c in node.calls())


def test_a_node_without_efa_mounts_over_tcp(tmp_path: Path, efa_bundle: Path) -> None:
    node = make_node(tmp_path, efa_bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": "m5.8xlarge"})
    assert node.run("configure_fsx").returncode == 0
    assert "m5.8xlarge takes no EFA for FSx for Lustre: mounting over TCP" in node.log.read_text()
    assert _lnet_calls(node) == []
    assert any(c.startswith("mount -t lustre") for c in node.calls())


def test_efa_devices_missing_on_an_efa_node_is_one_clear_failure(tmp_path: Path, efa_bundle: Path) -> None:
    node = make_node(tmp_path, efa_bundle)
    result = node.run("configure_fsx")
    assert result.returncode != 0
    assert (
        "no EFA devices under /sys/class/infiniband for LNet (p5.48xlarge has 32 EFA interfaces)"
        in node.log.read_text()
    )


def test_lnet_over_efa_is_refused_where_kiln_does_not_mount(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lustre_efa: got True for target 'parallelcluster', allowed: with lustre"):
        pcs_config(target="parallelcluster", lustre_efa=True)
