"""The EFA collector over a sysfs tree laid out like the kernel's: devices, ports, hardware counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from kiln.metrics.efa import EfaCollector, counter_name, find_efa_devices, port_is_active, read_ports
from tests.support.metrics import add_rdma_device, exposition, families_of, labels, parse_exposition

# Port counters the efa driver exposes (drivers/infiniband/hw/efa/efa_verbs.c), plus the rdma core's lifespan.
EFA_COUNTERS = {
    "tx_bytes": "123456789012\n",
    "tx_pkts": "1000\n",
    "rx_bytes": "987654321\n",
    "rx_pkts": "900\n",
    "rx_drops": "3\n",
    "send_bytes": "4096\n",
    "send_wrs": "16\n",
    "recv_bytes": "2048\n",
    "recv_wrs": "8\n",
    "rdma_read_bytes": "65536\n",
    "rdma_read_wrs": "4\n",
    "rdma_read_wr_err": "0\n",
    "rdma_read_resp_bytes": "32768\n",
    "rdma_write_bytes": "131072\n",
    "rdma_write_wrs": "2\n",
    "rdma_write_wr_err": "0\n",
    "rdma_write_recv_bytes": "262144\n",
    "retrans_bytes": "512\n",
    "retrans_pkts": "5\n",
    "retrans_timeout_events": "1\n",
    "impaired_remote_conn_events": "0\n",
    "unresponsive_remote_events": "2\n",
    "lifespan": "12\n",
}


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """Two EFA devices (one port down) and a Mellanox device that is not EFA."""
    root = tmp_path / "sys"
    add_rdma_device(root, "rdmap16s27", "efa", "0000:10:1b.0", {"1": ("4: ACTIVE", EFA_COUNTERS)})
    add_rdma_device(
        root, "rdmap32s27", "efa", "0000:20:1b.0", {"1": ("1: DOWN", {"tx_bytes": "7\n", "rx_bytes": "9\n"})}
    )
    add_rdma_device(root, "mlx5_0", "mlx5_core", "0000:30:00.0", {"1": ("4: ACTIVE", {"port_xmit_data": "42\n"})})
    return root


def _registry(sysfs: Path) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EfaCollector(sysfs))
    return registry


def test_only_devices_bound_to_the_efa_driver_are_found(sysfs: Path) -> None:
    assert find_efa_devices(sysfs) == ["rdmap16s27", "rdmap32s27"]


def test_a_scrape_exposes_devices_port_states_and_every_counter(sysfs: Path) -> None:
    text = exposition(_registry(sysfs))
    samples, types = parse_exposition(text)

    assert samples["kiln_efa_devices"] == {(): 2}
    assert samples["kiln_efa_port_active"] == {
        labels(device="rdmap16s27", port="1"): 1,
        labels(device="rdmap32s27", port="1"): 0,
    }
    counters = {name for name, kind in types.items() if kind == "counter"}
    assert counters == {f"kiln_efa_{name}" for name in EFA_COUNTERS if name != "lifespan"}
    assert samples["kiln_efa_tx_bytes"] == {
        labels(device="rdmap16s27", port="1"): 123456789012,
        labels(device="rdmap32s27", port="1"): 7,
    }
    assert samples["kiln_efa_retrans_timeout_events"] == {labels(device="rdmap16s27", port="1"): 1}
    assert samples["kiln_efa_unresponsive_remote_events"] == {labels(device="rdmap16s27", port="1"): 2}
    assert 'kiln_efa_rx_drops_total{device="rdmap16s27",port="1"} 3.0' in text
    # Neither the lifespan setting nor the Mellanox device's counters appear.
    assert "lifespan" not in text and "port_xmit_data" not in text and "mlx5_0" not in text


def test_each_scrape_reads_sysfs_again(sysfs: Path) -> None:
    registry = _registry(sysfs)
    counters = sysfs / "class" / "infiniband" / "rdmap32s27" / "ports" / "1" / "hw_counters"
    assert families_of(registry)["kiln_efa_rx_bytes"][labels(device="rdmap32s27", port="1")] == 9

    (counters / "rx_bytes").write_text("10\n")
    (counters.parent / "state").write_text("4: ACTIVE\n")
    samples = families_of(registry)

    assert samples["kiln_efa_rx_bytes"][labels(device="rdmap32s27", port="1")] == 10
    assert samples["kiln_efa_port_active"][labels(device="rdmap32s27", port="1")] == 1


def test_unreadable_and_non_integer_files_are_skipped_one_by_one(sysfs: Path) -> None:
    counters = sysfs / "class" / "infiniband" / "rdmap16s27" / "ports" / "1" / "hw_counters"
    (counters / "not_a_number").write_text("n/a\n")
    (counters / "empty").write_text("")
    (counters / "negative").write_text("-1\n")
    (counters / "a_directory").mkdir()
    os.symlink(counters / "gone", counters / "dangling")

    samples = families_of(_registry(sysfs))

    for skipped in ("not_a_number", "empty", "negative", "a_directory", "dangling"):
        assert f"kiln_efa_{skipped}" not in samples
    assert samples["kiln_efa_tx_pkts"] == {labels(device="rdmap16s27", port="1"): 1000}


def test_counter_names_are_sanitized(sysfs: Path) -> None:
    counters = sysfs / "class" / "infiniband" / "rdmap16s27" / "ports" / "1" / "hw_counters"
    (counters / "Odd-Name.v2").write_text("11\n")

    samples = families_of(_registry(sysfs))

    assert samples["kiln_efa_odd_name_v2"] == {labels(device="rdmap16s27", port="1"): 11}


@pytest.mark.parametrize(
    ("file_name", "name"),
    [("tx_bytes", "tx_bytes"), ("Odd-Name.v2", "odd_name_v2"), ("events_total", "events"), ("a b", "a_b")],
)
def test_counter_name(file_name: str, name: str) -> None:
    assert counter_name(file_name) == name


def test_counter_files_named_like_the_exporters_own_families_are_left_out(sysfs: Path) -> None:
    counters = sysfs / "class" / "infiniband" / "rdmap16s27" / "ports" / "1" / "hw_counters"
    (counters / "devices").write_text("5\n")
    (counters / "port_active").write_text("5\n")

    samples, types = parse_exposition(exposition(_registry(sysfs)))

    assert types["kiln_efa_devices"] == "gauge" and samples["kiln_efa_devices"] == {(): 2}
    assert types["kiln_efa_port_active"] == "gauge"


@pytest.mark.parametrize(
    ("state", "active"),
    [("4: ACTIVE", True), ("4: ACTIVE\n", True), ("1: DOWN", False), ("2: INIT", False), ("4", True), ("", False)],
)
def test_port_is_active(state: str, active: bool) -> None:
    assert port_is_active(state) is active


def test_a_port_without_state_or_counters_is_inactive_and_counts_nothing(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    device = add_rdma_device(root, "rdmap16s27", "efa", "0000:10:1b.0", {"1": ("4: ACTIVE", {})})
    (device / "ports" / "1" / "state").unlink()
    (device / "ports" / "1" / "hw_counters").rmdir()

    ports = read_ports(root, "rdmap16s27")

    assert [(port.port, port.active, dict(port.counters)) for port in ports] == [("1", False, {})]


def test_ports_come_in_numeric_order(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_rdma_device(root, "rdmap16s27", "efa", "0000:10:1b.0", {p: ("4: ACTIVE", {}) for p in ("10", "2", "1")})

    assert [port.port for port in read_ports(root, "rdmap16s27")] == ["1", "2", "10"]


def test_no_efa_device_is_zero_devices(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_rdma_device(root, "mlx5_0", "mlx5_core", "0000:30:00.0", {"1": ("4: ACTIVE", {"port_xmit_data": "1\n"})})
    (tmp_path / "bare").mkdir()

    for sysfs in (root, tmp_path / "bare"):
        samples = families_of(_registry(sysfs))
        assert samples == {"kiln_efa_devices": {(): 0}, "kiln_efa_port_active": {}}
