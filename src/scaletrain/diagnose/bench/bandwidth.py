"""Collective bandwidth, measured and reported the way nccl-tests does.

For a message of S bytes taking t seconds per call on n ranks:
  algbw = S / t                       (S: the all_reduce/broadcast buffer; for all_gather
                                       the gathered output, for reduce_scatter the input)
  busbw = algbw × 2(n-1)/n            all_reduce
  busbw = algbw × (n-1)/n             all_gather, reduce_scatter
  busbw = algbw                       broadcast
busbw is comparable with the link's hardware bandwidth whatever n is. t is the mean time of
`iterations` back-to-back calls after `warmup` calls, averaged over ranks (nccl-tests' default).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scaletrain.core.errors import ScaletrainError

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
ELEMENT_BYTES = 4  # float32, as nccl-tests' default
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
# Default sweep: 8 B up to the maximum, ×4 per step (nccl-tests uses -b 8 -e 256M -f 2).
DEFAULT_GPU_MAX_BYTES = 256 * 2**20
DEFAULT_CPU_MAX_BYTES = 32 * 2**20  # gloo over TCP: larger sizes only make the run long
_STEP = 4


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth."""
    n = world_size
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}
    factors["reduce_scatter"] = factors["all_gather"]
    factors["broadcast"] = 1.0
    return factors[op]


def bandwidths_gbps(
    op: str, size_bytes: int, time_s: float, world_size: int
) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for `size_bytes` moved in `time_s` per call."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(op, world_size)


def parse_size(text: str) -> int:
    """'8', '64K', '256M', '1G' (binary units) -> bytes."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text.strip().upper())
    if not match:
        raise ScaletrainError(
            f"{text!r} is not a message size.", "write sizes like 8, 64K, 256M or 1G (bytes)."
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


def format_size(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return str(size)


def sweep(max_bytes: int) -> list[int]:
    sizes, size = [], 8
    while size <= max_bytes:
        sizes.append(size)
        size *= _STEP
    return sizes


def parse_ops(text: str) -> tuple[str, ...]:
    ops = tuple(op.strip() for op in text.split(",") if op.strip())
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise ScaletrainError(
            f"Unknown collective(s): {', '.join(unknown) or '(none given)'}.",
            f"choose from {', '.join(OPS)}.",
        )
    return ops


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """One collective at one size on this rank: the raw timing and the result check."""

    op: str
    size_bytes: int
    count: int
    warmup: int
    iterations: int
    loop_seconds: float
    """Wall time of the `iterations` timed calls on this rank."""
    correct: bool


def elements_for(size_bytes: int, world_size: int) -> int:
    """float32 elements for a size, a multiple of the ranks (for all_gather/reduce_scatter)."""
    count = max(size_bytes // ELEMENT_BYTES, 1)
    return max(count // world_size, 1) * world_size


def _collective(
    op: str, count: int, device: torch.device, group: dist.ProcessGroup | None
) -> tuple[Callable[[], object], Callable[[], bool]]:
    """The call to time and a check of its result (values chosen so any error shows)."""
    import torch
    import torch.distributed as dist

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    chunk = count // world_size
    if op == "all_reduce":
        buffer = torch.empty(count, device=device)

        def check_sum() -> bool:
            buffer.fill_(rank + 1.0)
            dist.all_reduce(buffer, group=group)
            return bool((buffer == world_size * (world_size + 1) / 2).all())

        return lambda: dist.all_reduce(buffer, group=group), check_sum
    # torch 2.14 renamed the single-tensor collectives (the old names warn); older torch,
    # which users' clusters may provide, has only the old names.
    gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter_single = (
        getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    )
    if op == "all_gather":
        gathered, mine = torch.empty(count, device=device), torch.empty(chunk, device=device)

        def check_gathered() -> bool:
            mine.fill_(float(rank))
            gather_single(gathered, mine, group=group)
            expected = torch.arange(world_size, device=device).repeat_interleave(chunk)
            return bool((gathered == expected).all())

        return lambda: gather_single(gathered, mine, group=group), check_gathered
    if op == "reduce_scatter":
        inputs, mine = torch.empty(count, device=device), torch.empty(chunk, device=device)

        def check_scattered() -> bool:
            inputs.fill_(1.0)
            reduce_scatter_single(mine, inputs, group=group)
            return bool((mine == world_size).all())

        return lambda: reduce_scatter_single(mine, inputs, group=group), check_scattered
    buffer = torch.empty(count, device=device)
    source = dist.get_global_rank(group, 0) if group is not None else 0

    def check_broadcast() -> bool:
        buffer.fill_(7.0 if rank == 0 else 0.0)
        dist.broadcast(buffer, src=source, group=group)
        return bool((buffer == 7.0).all())

    return lambda: dist.broadcast(buffer, src=source, group=group), check_broadcast


def measure(
    op: str,
    size_bytes: int,
    *,
    device: torch.device,
    warmup: int,
    iterations: int,
    group: dist.ProcessGroup | None = None,
) -> Measurement:
    """Time `iterations` calls of one collective (every rank of `group` calls this)."""
    import torch
    import torch.distributed as dist

    count = elements_for(size_bytes, dist.get_world_size(group))
    call, check = _collective(op, count, device, group)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        call()
    synchronize()
    dist.barrier(group=group)
    started = time.perf_counter()
    for _ in range(iterations):
        call()
    synchronize()
    loop_seconds = time.perf_counter() - started
    return Measurement(
        op=op,
        size_bytes=count * ELEMENT_BYTES,
        count=count,
        warmup=warmup,
        iterations=iterations,
        loop_seconds=loop_seconds,
        correct=check(),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class BandwidthRow:
    """One collective at one size over all ranks, in nccl-tests' terms."""

    op: str
    size_bytes: int
    count: int
    iterations: int
    loop_seconds_per_rank: tuple[float, ...]
    time_s: float
    """Mean time per call: each rank's loop time / iterations, averaged over ranks."""
    algbw_gbps: float
    busbw_gbps: float
    correct: bool


def summarize(per_rank: list[list[Measurement]], world_size: int) -> list[BandwidthRow]:
    """Rows from every rank's measurements (the same order on every rank)."""
    rows = []
    for measured in zip(*per_rank, strict=True):
        first = measured[0]
        loops = tuple(m.loop_seconds for m in measured)
        time_s = sum(loops) / len(loops) / first.iterations
        algbw, busbw = bandwidths_gbps(first.op, first.size_bytes, time_s, world_size)
        rows.append(
            BandwidthRow(
                op=first.op,
                size_bytes=first.size_bytes,
                count=first.count,
                iterations=first.iterations,
                loop_seconds_per_rank=loops,
                time_s=time_s,
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                correct=all(m.correct for m in measured),
            )
        )
    return rows
