"""Where one rank's time went: compute, communication (and how much of it overlapped
compute), memory copies, data loading, idle; and its top kernels or operators.

GPU traces follow Holistic Trace Analysis's definitions, so that the numbers agree on the
same trace: device events launched before the last profiler step began (HTA leaves that
step out: its kernels may be cut off); span = first kernel start to last kernel end; idle =
span - time any kernel runs; compute = time compute kernels run; non-compute = span -
compute - idle; overlap = time communication and compute kernels run together, as a share
of communication time. CPU-only traces (gloo) have no device: the training thread's
operators are the compute, gloo's ranges (on its own threads) the communication, and the
span is the profiled steps but the last.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from scaletrain.observe.analysis.intervals import Interval, clip, intersect, length, merge, subtract
from scaletrain.observe.analysis.trace_reader import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    RankTrace,
    trace_names,
)

# Operators and kernels listed per rank in the report.
TOP = 10


@dataclass(frozen=True, kw_only=True, slots=True)
class Breakdown:
    """One rank's time over the analysed span, in microseconds."""

    rank: int
    device: str
    """'gpu' (kernels on a device) or 'cpu' (a CPU-only trace)."""
    span_us: float
    """HTA's kernel_time: first kernel start to last kernel end (CPU: the steps' span)."""
    steps: int
    compute_us: float
    communication_us: float
    overlap_us: float
    """Communication that ran while compute ran (hidden behind it)."""
    memory_us: float
    data_loading_us: float
    idle_us: float

    @property
    def non_compute_us(self) -> float:
        return self.span_us - self.compute_us - self.idle_us

    @property
    def overlap_ratio(self) -> float:
        """HTA's comp_comm_overlap_ratio: overlapped / all communication time."""
        return self.overlap_us / self.communication_us if self.communication_us else 0.0

    @property
    def exposed_communication_us(self) -> float:
        """Communication nothing else hid: the time scaling costs."""
        return self.communication_us - self.overlap_us


@dataclass(frozen=True, kw_only=True, slots=True)
class TopEntry:
    name: str
    count: int
    total_us: float


def _last_step_start(trace: RankTrace) -> float | None:
    """HTA's cut-off: the start of the last profiler step, where there are two or more."""
    return trace.steps[-1][0] if len(trace.steps) >= 2 else None


def kept_device_events(trace: RankTrace) -> Iterator[tuple[float, float, int, int]]:
    """Device events whose launch (same correlation id) began before the cut-off."""
    cutoff = _last_step_start(trace)
    if cutoff is None:
        yield from trace.device
        return
    early = {
        correlation
        for start, correlation in zip(trace.launches.start, trace.launches.extra, strict=True)
        if start < cutoff
    }
    for event in trace.device:
        if event[3] in early:
            yield event


def _host_intervals(trace: RankTrace, pattern_name: str, thread: int | None) -> list[Interval]:
    pattern = getattr(trace_names(), pattern_name)
    return merge(
        (start, start + duration)
        for start, duration, name_id, tid in trace.host
        if (thread is None or tid == thread) and pattern.match(trace.names[name_id])
    )


def breakdown(trace: RankTrace) -> Breakdown:
    return _gpu_breakdown(trace) if trace.has_device_events else _cpu_breakdown(trace)


def _gpu_breakdown(trace: RankTrace) -> Breakdown:
    names = trace_names()
    by_kind: dict[str, list[Interval]] = defaultdict(list)
    everything: list[Interval] = []
    kinds: dict[int, str] = {}
    for start, duration, name_id, _ in kept_device_events(trace):
        kind = kinds.get(name_id)
        if kind is None:
            kind = kinds[name_id] = names.device_kind(trace.names[name_id])
        by_kind[kind].append((start, start + duration))
        everything.append((start, start + duration))
    busy = merge(everything)
    span = busy[-1][1] - busy[0][0] if busy else 0.0
    compute, communication = merge(by_kind[COMPUTE]), merge(by_kind[COMMUNICATION])
    data = clip(_host_intervals(trace, "data_loading", None), *_bounds(busy))
    return Breakdown(
        rank=trace.rank,
        device="gpu",
        span_us=span,
        steps=max(len(trace.steps) - 1, 1),
        compute_us=length(compute),
        communication_us=length(communication),
        overlap_us=length(intersect(communication, compute)),
        memory_us=length(merge(by_kind[MEMORY])),
        data_loading_us=length(data),
        idle_us=span - length(busy),
    )


def _bounds(busy: list[Interval]) -> tuple[float, float]:
    return (busy[0][0], busy[-1][1]) if busy else (0.0, 0.0)


def training_thread(trace: RankTrace) -> int | None:
    return trace.steps[0][3] if trace.steps else None


def cpu_span(trace: RankTrace) -> tuple[float, float]:
    """The profiled steps but the last (as HTA), or all of them when there is one."""
    if not trace.steps:
        starts = [start for start, *_ in trace.host]
        ends = [start + duration for start, duration, *_ in trace.host]
        return (min(starts), max(ends)) if starts else (0.0, 0.0)
    first = trace.steps[0][0]
    if len(trace.steps) >= 2:
        return first, trace.steps[-1][0]
    return first, first + trace.steps[0][1]


def _cpu_breakdown(trace: RankTrace) -> Breakdown:
    start, end = cpu_span(trace)
    thread = training_thread(trace)
    names = trace_names()
    operators = merge(
        (begin, begin + duration)
        for begin, duration, name_id, tid in trace.host
        if tid == thread
        and not names.host_communication.match(trace.names[name_id])
        and not names.data_loading.match(trace.names[name_id])
        and not names.step.match(trace.names[name_id])
    )
    data = clip(_host_intervals(trace, "data_loading", thread), start, end)
    communication = clip(
        merge(
            _host_intervals(trace, "collective", None)
            + _host_intervals(trace, "host_communication", thread)
        ),
        start,
        end,
    )
    launches_on_thread = _host_intervals(trace, "host_communication", thread)
    compute = subtract(subtract(clip(operators, start, end), data), launches_on_thread)
    busy = merge(compute + communication + data)
    return Breakdown(
        rank=trace.rank,
        device="cpu",
        span_us=end - start,
        steps=max(len(trace.steps) - 1, 1),
        compute_us=length(compute),
        communication_us=length(communication),
        overlap_us=length(intersect(communication, compute)),
        memory_us=0.0,
        data_loading_us=length(data),
        idle_us=(end - start) - length(busy),
    )


def top_entries(trace: RankTrace, limit: int = TOP) -> list[TopEntry]:
    """GPU traces: kernels by total time. CPU traces: operators by self time (time not
    spent in operators they called), on every thread, within the analysed span."""
    totals: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    if trace.has_device_events:
        for _, duration, name_id, _ in kept_device_events(trace):
            totals[name_id] += duration
            counts[name_id] += 1
    else:
        _self_times(trace, totals, counts)
    ranked = sorted(totals, key=lambda name_id: totals[name_id], reverse=True)[:limit]
    return [TopEntry(name=trace.names[i], count=counts[i], total_us=totals[i]) for i in ranked]


def _self_times(trace: RankTrace, totals: dict[int, float], counts: dict[int, int]) -> None:
    names = trace_names()
    start, end = cpu_span(trace)
    by_thread: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for begin, duration, name_id, tid in trace.host:
        if start <= begin < end and not names.step.match(trace.names[name_id]):
            by_thread[tid].append((begin, -duration, name_id))  # outer first at equal starts
    for events in by_thread.values():
        events.sort()
        stack: list[tuple[float, int]] = []  # (end, name id) of open operators
        for begin, negative, name_id in events:
            while stack and stack[-1][0] <= begin:
                stack.pop()
            duration = -negative
            if stack:
                totals[stack[-1][1]] -= duration  # the parent did not spend this time itself
            totals[name_id] += duration
            counts[name_id] += 1
            stack.append((begin + duration, name_id))
