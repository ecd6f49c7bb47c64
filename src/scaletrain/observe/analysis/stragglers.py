"""Stragglers and load imbalance across ranks, from their traces.

A straggler arrives late at collectives: the others wait for it inside the collective, so
their communication time grows while its own stays short. Each rank's n-th collective is
matched across ranks; how late a rank starts it, compared with the first rank there, is its
lateness. Some rank is always first, so a straggler is a rank whose mean lateness exceeds
the median rank's by a share of a step. Clocks of ranks on one node agree; across nodes they
are as good as the nodes' time sync (typically well below a millisecond with NTP/PTP).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scaletrain.observe.analysis.breakdown import Breakdown
from scaletrain.observe.analysis.trace_reader import RankTrace, trace_names

# A rank is a straggler when it starts collectives this share of a step later than the
# median rank, on average; compute differing by this share between ranks is imbalance.
LATE_SHARE_OF_STEP = 0.05
IMBALANCE_SHARE = 0.10


@dataclass(frozen=True, kw_only=True, slots=True)
class RankTiming:
    rank: int
    step_times_us: tuple[float, ...]
    """Durations of the profiled steps (all but the last: it ends when the profile ends)."""
    mean_lateness_us: float
    """Mean delay of this rank's collective starts behind the first rank's."""
    collectives: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Stragglers:
    timings: tuple[RankTiming, ...]
    stragglers: tuple[int, ...]
    imbalance: float
    """(max - mean) / mean of compute time over ranks."""
    slowest_compute_rank: int | None
    findings: tuple[str, ...]


def _collective_starts(trace: RankTrace) -> list[tuple[str, float]]:
    pattern = trace_names().collective
    starts = [
        (trace.names[name_id], start)
        for start, _, name_id, _ in trace.host
        if pattern.match(trace.names[name_id])
    ]
    return sorted(starts, key=lambda item: item[1])


def _step_times(trace: RankTrace) -> tuple[float, ...]:
    steps = trace.steps[:-1] if len(trace.steps) >= 2 else trace.steps
    return tuple(duration for _, duration, _, _ in steps)


def find_stragglers(traces: Sequence[RankTrace], breakdowns: Sequence[Breakdown]) -> Stragglers:
    starts = {trace.rank: _collective_starts(trace) for trace in traces}
    count = min((len(found) for found in starts.values()), default=0)
    lateness: dict[int, list[float]] = {rank: [] for rank in starts}
    for index in range(count):
        first = min(found[index][1] for found in starts.values())
        for rank, found in starts.items():
            lateness[rank].append(found[index][1] - first)
    timings = tuple(
        RankTiming(
            rank=trace.rank,
            step_times_us=_step_times(trace),
            mean_lateness_us=statistics.fmean(lateness[trace.rank]) if count else 0.0,
            collectives=count,
        )
        for trace in sorted(traces, key=lambda t: t.rank)
    )
    all_steps = [time for timing in timings for time in timing.step_times_us]
    step_us = statistics.median(all_steps) if all_steps else 0.0
    typical = statistics.median(t.mean_lateness_us for t in timings) if timings else 0.0
    late = tuple(
        timing.rank
        for timing in timings
        if len(timings) > 1
        and step_us
        and timing.mean_lateness_us - typical > LATE_SHARE_OF_STEP * step_us
    )
    findings = [
        f"rank {timing.rank} starts collectives {(timing.mean_lateness_us - typical) / 1000:.2f}"
        f" ms after the median rank on average "
        f"({(timing.mean_lateness_us - typical) / step_us:.0%} of a {step_us / 1000:.1f} ms "
        "step): the others wait for it"
        for timing in timings
        if timing.rank in late
    ]
    compute = {b.rank: b.compute_us for b in breakdowns}
    mean = statistics.fmean(compute.values()) if compute else 0.0
    imbalance = (max(compute.values()) - mean) / mean if mean else 0.0
    slowest = max(compute, key=lambda rank: compute[rank]) if compute else None
    if len(compute) > 1 and imbalance > IMBALANCE_SHARE:
        findings.append(
            f"load imbalance: rank {slowest} computes {imbalance:.0%} longer than the mean "
            "rank; uneven batches or sequence lengths, or a slower device or node"
        )
    return Stragglers(
        timings=timings,
        stragglers=late,
        imbalance=imbalance,
        slowest_compute_rank=slowest,
        findings=tuple(findings),
    )
