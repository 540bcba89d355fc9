"""Reading NCCL_DEBUG=INFO output for the transport, to catch a fall-back to TCP sockets on EFA."""

from __future__ import annotations

from kiln.launcher.nccllog import parse

EFA_OLD = """
ip-10-0-1-5:21:21 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.7.4-aws
ip-10-0-1-5:21:21 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
ip-10-0-1-5:21:21 [0] NCCL INFO Using network AWS Libfabric
ip-10-0-1-5:21:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0
"""

EFA_NEW = """
node-0:172:172 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v11)
node-0:172:172 [0] NCCL INFO Using network Libfabric
node-0:172:172 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 3 nics)
"""

SOCKET = """
node-0:1482:1482 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
node-0:1482:1482 [0] NCCL INFO NET/IB : No device found.
node-0:1482:1482 [0] NCCL INFO NET/Socket : Using [0]ens5:10.0.4.51<0>
node-0:1482:1482 [0] NCCL INFO Using network Socket
node-0:1482:1500 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""

LIBFABRIC_TCP = """
node-0:7:7 [0] NCCL INFO Using network Libfabric
node-0:7:7 [0] NCCL INFO NET/OFI Selected provider is tcp;ofi_rxm, fabric is 10.0.0.0/16 (found 1 nics)
"""

IB = "e2e-head:7:19 [0] NCCL INFO Using network IB\n"


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
