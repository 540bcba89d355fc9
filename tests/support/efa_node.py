"""A GPU node's (or pod's) EFA devices and NCCL's EFA stack under a temp root, read through KILN_ROOT.

What each piece stands for: the RDMA devices EFA registers in /sys/class/infiniband; the aws-ofi-nccl plugin where
the EFA installer puts it in a container (/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu, AWS's EFA NCCL test
Dockerfile); libfabric's library (/opt/amazon/efa/lib); and fi_info in /opt/amazon/efa/bin, a stub that answers
`-p efa` as libfabric's tool does: the provider's entries when it has the efa provider, else fi_getinfo's
"No data available" and exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN_DIR = "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
LIBFABRIC_DIR = "opt/amazon/efa/lib"
TOOL_DIR = "opt/amazon/efa/bin"
FI_INFO_EFA = "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 123.0\n    type: FI_EP_RDM\n"


def simulate_efa_node(
    root: Path,
    *,
    devices: int = 32,
    plugin: str | None = None,
    libnccl_net_link: bool = False,
    fi_info: bool | None = None,
) -> Path:
    """Lay out under ROOT a node with DEVICES EFA devices; PLUGIN: the plugin's file name (None: no plugin), with a
    libnccl-net.so beside it when LIBNCCL_NET_LINK; FI_INFO: True lists the efa provider, False lists none, None: no
    fi_info at all. A stock PyTorch image on an EFA node is the defaults."""
    for index in range(devices):
        (root / "sys/class/infiniband" / f"rdmap{index}s0").mkdir(parents=True)
    if plugin is not None:
        (root / PLUGIN_DIR).mkdir(parents=True)
        (root / PLUGIN_DIR / plugin).write_bytes(b"\x7fELF")
        if libnccl_net_link:
            (root / PLUGIN_DIR / "libnccl-net.so").symlink_to(plugin)
        (root / LIBFABRIC_DIR).mkdir(parents=True)
        (root / LIBFABRIC_DIR / "libfabric.so.1").write_bytes(b"\x7fELF")
    if fi_info is not None:
        (root / TOOL_DIR).mkdir(parents=True)
        tool = root / TOOL_DIR / "fi_info"
        if fi_info:
            body = f"import sys\nassert sys.argv[1:] == ['-p', 'efa'], sys.argv\nprint({FI_INFO_EFA!r}, end='')\n"
        else:
            body = "import sys\nprint('fi_getinfo: -61 (No data available)', file=sys.stderr)\nsys.exit(1)\n"
        tool.write_text(f"#!{sys.executable}\n{body}")
        tool.chmod(0o755)
    return root
