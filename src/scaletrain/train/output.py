"""Output from rank 0 only, so that N processes do not print everything N times."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist


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
