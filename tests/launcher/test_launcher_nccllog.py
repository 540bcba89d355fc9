"""Reading NCCL_DEBUG=INFO output for the transport, to catch a fall-back to TCP sockets on EFA."""

from __future__ import annotations

from kiln.launcher.nccllog import parse
from tests.support.nccl_logs import EFA_NEW, EFA_OLD, IB, LIBFABRIC_TCP, SOCKET


def test_old_and_new_plugin_logs_mean_efa():
    for text in (EFA_OLD, EFA_NEW):
        transport = parse(text.splitlines())
        assert transport.found
        assert transport.uses_efa
        assert not transport.tcp_fallback
        assert transport.providers == ("efa",)
    assert parse(EFA_OLD.splitlines()).aws_ofi_nccl == "1.7.4-aws"


def test_nccl_socket_transport_is_a_fallback():
    transport = parse(SOCKET.splitlines())
    assert transport.tcp_fallback
    assert not transport.uses_efa
    assert transport.plugin_missing
    assert transport.networks == ("Socket",)
    assert any("Using network Socket" in line for line in transport.evidence)


def test_libfabric_tcp_provider_is_a_fallback_too():
    transport = parse(LIBFABRIC_TCP.splitlines())
    assert transport.tcp_fallback
    assert not transport.uses_efa


def test_a_socket_channel_alone_is_enough_evidence():
    transport = parse(["x:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [receive] via NET/Socket/1"])
    assert transport.tcp_fallback


def test_infiniband_is_neither_efa_nor_tcp():
    transport = parse(IB.splitlines())
    assert transport.found
    assert not transport.tcp_fallback
    assert not transport.uses_efa


def test_no_lines_no_evidence():
    transport = parse(["NCCL version 2.21.5+cuda12.4", "unrelated"])
    assert not transport.found
    assert not transport.uses_efa
