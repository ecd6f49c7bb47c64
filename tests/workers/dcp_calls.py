"""Counts the object collectives DCP itself runs in a worker's process: those it gathers,
scatters and broadcasts its plans and results with, called from DCP's own code."""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch.distributed as dist

_COLLECTIVES = (
    "gather_object",
    "scatter_object_list",
    "broadcast_object_list",
    "all_gather_object",
)
_calls = 0


def _counted(collective: Any) -> Any:
    @functools.wraps(collective)
    def run(*args: Any, **kwargs: Any) -> Any:
        global _calls
        _calls += "torch/distributed/checkpoint/" in sys._getframe(1).f_code.co_filename
        return collective(*args, **kwargs)

    return run


def start_counting() -> None:
    """Count from now on (call once, before the first save or load)."""
    for name in _COLLECTIVES:
        setattr(dist, name, _counted(getattr(dist, name)))


def dcp_collectives() -> int:
    """DCP's own calls of those collectives since `start_counting`."""
    return _calls
