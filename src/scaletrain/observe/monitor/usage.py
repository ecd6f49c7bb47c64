"""Monitor samples summarized per node, GPU and rank, and what in them needs attention.

The same summary serves the live view (over the last few samples) and the report after the
job (over all of them), so a flag means the same thing in both.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scaletrain.observe.monitor.samples import Sample

# A GPU busy less than this share of the time while training runs is idle (seed 000: "check
# that you are actually using all GPUs").
IDLE_GPU_PERCENT = 10.0
# Ranks that should do equal work differ by more than this share of the busiest one.
IMBALANCE_FRACTION = 0.25
# Memory above this share of the total is near the limit (out-of-memory is close).
MEMORY_NEAR_LIMIT = 0.90


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuUsage:
    host: str
    index: int
    name: str
    mean_utilization: float | None
    peak_memory_bytes: int | None
    memory_total_bytes: int | None
    mean_power_watts: float | None
    ranks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class RankUsage:
    rank: int
    host: str
    mean_cpu_percent: float
    peak_rss_bytes: int
    gpu_index: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeUsage:
    host: str
    samples: int
    first: float
    last: float
    mean_cpu_percent: float
    peak_memory_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    nodes: tuple[NodeUsage, ...]
    gpus: tuple[GpuUsage, ...]
    ranks: tuple[RankUsage, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """Something the user should look at, in one sentence."""

    kind: str
    """'idle-gpu', 'imbalance' or 'memory'."""
    message: str


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present else None


def _peak(values: Iterable[int | None]) -> int | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def summarize(samples_by_host: Mapping[str, Sequence[Sample]]) -> Usage:
    """Means and peaks per node, GPU and rank over the given samples."""
    nodes, gpus, ranks = [], [], []
    for host, samples in sorted(samples_by_host.items()):
        if not samples:
            continue
        nodes.append(
            NodeUsage(
                host=host,
                samples=len(samples),
                first=samples[0].time,
                last=samples[-1].time,
                mean_cpu_percent=statistics.fmean(sample.cpu_percent for sample in samples),
                peak_memory_bytes=max(sample.memory_used_bytes for sample in samples),
                memory_total_bytes=samples[-1].memory_total_bytes,
            )
        )
        by_rank: dict[int, list[tuple[float, int, int | None]]] = {}
        for sample in samples:
            for rank in sample.ranks:
                by_rank.setdefault(rank.rank, []).append(
                    (rank.cpu_percent, rank.rss_bytes, rank.gpu_index)
                )
        for rank_id, values in sorted(by_rank.items()):
            gpu_indices = [gpu for _, _, gpu in values if gpu is not None]
            ranks.append(
                RankUsage(
                    rank=rank_id,
                    host=host,
                    mean_cpu_percent=statistics.fmean(cpu for cpu, _, _ in values),
                    peak_rss_bytes=max(rss for _, rss, _ in values),
                    gpu_index=gpu_indices[-1] if gpu_indices else None,
                )
            )
        indices = sorted({gpu.index for sample in samples for gpu in sample.gpus})
        for index in indices:
            readings = [gpu for sample in samples for gpu in sample.gpus if gpu.index == index]
            on_gpu = tuple(r.rank for r in ranks if r.host == host and r.gpu_index == index)
            gpus.append(
                GpuUsage(
                    host=host,
                    index=index,
                    name=readings[-1].name,
                    mean_utilization=_mean(gpu.utilization_percent for gpu in readings),
                    peak_memory_bytes=_peak(gpu.memory_used_bytes for gpu in readings),
                    memory_total_bytes=readings[-1].memory_total_bytes,
                    mean_power_watts=_mean(gpu.power_watts for gpu in readings),
                    ranks=on_gpu,
                )
            )
    return Usage(nodes=tuple(nodes), gpus=tuple(gpus), ranks=tuple(sorted(ranks, key=_rank)))


def _rank(usage: RankUsage) -> int:
    return usage.rank


def find_problems(usage: Usage) -> list[Finding]:
    """Idle GPUs, ranks doing unequal work, memory near the limit."""
    findings = []
    training = bool(usage.ranks)
    for gpu in usage.gpus:
        where = f"{gpu.host} GPU {gpu.index}"
        busy = gpu.mean_utilization
        if training and busy is not None and busy < IDLE_GPU_PERCENT:
            findings.append(
                Finding(
                    kind="idle-gpu",
                    message=f"{where} is idle ({busy:.0f}% busy) while "
                    "training runs: is a process using it? (one process per GPU, LOCAL_RANK)",
                )
            )
        if gpu.peak_memory_bytes and gpu.memory_total_bytes:
            share = gpu.peak_memory_bytes / gpu.memory_total_bytes
            if share >= MEMORY_NEAR_LIMIT:
                findings.append(
                    Finding(
                        kind="memory",
                        message=f"{where} memory reached {share:.0%} of "
                        f"{gpu.memory_total_bytes / 1e9:.0f} GB: near out-of-memory",
                    )
                )
    for node in usage.nodes:
        share = node.peak_memory_bytes / node.memory_total_bytes
        if share >= MEMORY_NEAR_LIMIT:
            findings.append(
                Finding(
                    kind="memory",
                    message=f"{node.host} host memory reached {share:.0%} of "
                    f"{node.memory_total_bytes / 1e9:.0f} GB: the job may be killed for it",
                )
            )
    findings.extend(_imbalance(usage))
    return findings


def _imbalance(usage: Usage) -> list[Finding]:
    """Ranks whose GPU (where known) or CPU use lags the busiest rank's by a large share."""
    gpu_use = {
        rank: gpu.mean_utilization
        for gpu in usage.gpus
        for rank in gpu.ranks
        if gpu.mean_utilization is not None
    }
    if len(gpu_use) >= 2:
        what, use = "GPU", gpu_use
    else:
        what, use = "CPU", {rank.rank: rank.mean_cpu_percent for rank in usage.ranks}
    if len(use) < 2:
        return []
    busiest = max(use.values())
    if busiest <= 0:
        return []
    behind = sorted(r for r, value in use.items() if value < busiest * (1 - IMBALANCE_FRACTION))
    if not behind:
        return []
    listed = ", ".join(f"rank {r} {use[r]:.0f}%" for r in behind)
    return [
        Finding(
            kind="imbalance",
            message=f"ranks do unequal work: {listed} vs {busiest:.0f}% {what} for the busiest; "
            "uneven data shards or a slow node? (`scaletrain analyze` on a profile shows where)",
        )
    ]


def window(samples: Sequence[Sample], seconds: float) -> list[Sample]:
    """The samples of the last `seconds` (the live view's window)."""
    if not samples:
        return []
    start = samples[-1].time - seconds
    return [sample for sample in samples if sample.time >= start]
