"""What the installed torch can do, asked of torch itself (not read from its version)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def gloo_all_reduce_averages() -> bool:
    """Whether this torch's gloo has an averaging all-reduce (ReduceOp.AVG), asked in a world
    of one in this process."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        dist.all_reduce(torch.ones(1), op=dist.ReduceOp.AVG)
    except (RuntimeError, ValueError):
        return False
    finally:
        dist.destroy_process_group()
    return True
