"""Let ranks take turns: rank 0 prepares shared files while the others wait."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist

from scaletrain.runtime.process_group import current_env


def barrier() -> None:
    """Wait until every rank arrives here (no-op without a process group)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def all_gather_objects(value: Any) -> list[Any]:
    """Every rank's `value` (picklable), in rank order, on every rank."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


@contextmanager
def rank_zero_first(*, per_node: bool = False) -> Iterator[None]:
    """Run the block on rank 0 first, then on all other ranks.

    Use it around a data set download or preparation: rank 0 writes the files, the others
    then find them ready. With `per_node=True` the first process of every node goes first,
    for data prepared on node-local disks.
    """
    env = current_env()
    goes_first = env.local_rank == 0 if per_node else env.rank == 0
    if not goes_first:
        barrier()
    try:
        yield
    finally:
        if goes_first:
            barrier()
