"""Helpers for N processes running one script: output from rank 0 only, taking turns, and
the same (or deliberately different) random numbers on every rank."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from scaletrain.runtime.long_waits import DEFAULT_LONG_WAIT
from scaletrain.runtime.process_group import current_env, long_waits


def global_rank() -> int:
    """This process's rank, also before or without scaletrain.init()."""
    if dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def is_main_process() -> bool:
    return global_rank() == 0


def print0(*values: Any, **print_options: Any) -> None:
    """print() on rank 0 only, flushed at once so that Slurm logs show it immediately."""
    if is_main_process():
        print(*values, **print_options, flush=True)


def barrier(*, timeout: timedelta = DEFAULT_LONG_WAIT) -> None:
    """Wait until every rank arrives here, for up to `timeout` (default 24 hours); a no-op
    without a process group.

    It waits on the rendezvous store, not with a collective: NCCL ends a process whose
    collective waits longer than the group's timeout (10 minutes by default).
    """
    if dist.is_initialized() and dist.get_world_size() > 1:
        long_waits().barrier(timeout)


@contextmanager
def rank_zero_first(
    *, per_node: bool = False, timeout: timedelta = DEFAULT_LONG_WAIT
) -> Iterator[None]:
    """Run the block on rank 0 first, then on all other ranks.

    Use it around a data set download or preparation: rank 0 writes the files, the others
    then find them ready. With `per_node=True` the first process of every node goes first,
    for data prepared on node-local disks. The others wait up to `timeout` (default 24
    hours; on the rendezvous store, so NCCL's 10-minute collective timeout does not apply).
    """
    env = current_env()
    if env.world_size == 1:
        yield
        return
    waits = long_waits()
    key = waits.new_key("first")
    goes_first = env.local_rank == 0 if per_node else env.rank == 0
    first_count = env.num_nodes if per_node else 1
    if not goes_first:
        who = "rank 0" if first_count == 1 else f"local rank 0 of {first_count} nodes"
        waits.wait(key, timeout, f"{who} to finish its rank_zero_first block")
    try:
        yield
    finally:
        if goes_first:
            waits.arrive(key, first_count)


def seed_everything(seed: int, *, per_rank: bool = False) -> int:
    """Seed Python, NumPy (when installed) and torch on all devices; return the seed used.

    The same seed on every rank gives identical initial weights; `per_rank=True` adds the
    rank so that, e.g., random augmentations differ between ranks.
    """
    if per_rank:
        seed += current_env().rank
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    return seed
