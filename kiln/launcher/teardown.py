"""How kiln's distributed worker scripts (smoke, the check) end.

Once their last collective returns, a gloo thread may still be freeing that work item's tensors, which takes the
GIL. Destroying the process group (destroy_process_group, or DDP's reducer freed as main returns) joins that thread
while the main thread holds the GIL: the rank never exits, and the job hangs until an agent's exit barrier gives up
(seen on a loaded machine). So a worker ends here: a barrier, then exit without interpreter teardown, with
everything it leaves (checkpoints, results, its output) written and flushed before.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch.distributed as dist


def leave(code: int) -> NoReturn:
    """Exit with CODE once stdout and stderr are flushed, skipping interpreter teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def end_distributed_worker(code: int = 0) -> NoReturn:
    """Wait for every rank to get here (the barrier's wait releases the GIL), then leave with CODE."""
    dist.barrier()
    leave(code)
