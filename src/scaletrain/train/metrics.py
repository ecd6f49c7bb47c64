"""Reduce metrics across ranks: every rank passes its value and gets the global one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import torch
import torch.distributed as dist

Number: TypeAlias = float | int | torch.Tensor


def _device() -> torch.device:
    # nccl reduces only tensors on the GPU, gloo only on the CPU.
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def sum_over_ranks(values: Mapping[str, Number]) -> dict[str, float]:
    """Sum each named value over all ranks with a single all_reduce."""
    names = list(values)
    if not names:
        return {}  # every rank passes the same names, so every rank skips the all_reduce
    stacked = torch.stack(
        [torch.as_tensor(values[name], dtype=torch.float64).detach().cpu() for name in names]
    ).to(_device())
    if _world_size() > 1:
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
    return dict(zip(names, stacked.tolist(), strict=True))


def mean_over_ranks(values: Mapping[str, Number]) -> dict[str, float]:
    """Average each named value over all ranks with a single all_reduce."""
    world_size = _world_size()
    return {name: total / world_size for name, total in sum_over_ranks(values).items()}


def mean(value: Number) -> float:
    """The average of `value` over all ranks (every rank must call this)."""
    return mean_over_ranks({"value": value})["value"]


def total(value: Number) -> float:
    """The sum of `value` over all ranks (every rank must call this)."""
    return sum_over_ranks({"value": value})["value"]
