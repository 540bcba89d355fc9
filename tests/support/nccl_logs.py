"""NCCL_DEBUG=INFO output as NCCL and the aws-ofi-nccl plugin print it: EFA (old and new plugin), NCCL's own TCP
sockets, libfabric's tcp provider, InfiniBand. The launcher's transport tests read them."""

from __future__ import annotations

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
