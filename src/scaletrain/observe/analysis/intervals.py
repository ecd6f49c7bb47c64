"""Time intervals (start, end) in microseconds: union, total length, intersection, difference.

Lists are merged once (`merge`) and then combined in linear time; this is where compute,
communication, overlap and idle time come from.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same time (touching ones join)."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(merged: Iterable[Interval]) -> float:
    return sum(end - start for start, end in merged)


def intersect(first: list[Interval], second: list[Interval]) -> list[Interval]:
    """Time covered by both (both merged)."""
    result: list[Interval] = []
    i = j = 0
    while i < len(first) and j < len(second):
        start = max(first[i][0], second[j][0])
        end = min(first[i][1], second[j][1])
        if start < end:
            result.append((start, end))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return result


def subtract(first: list[Interval], second: list[Interval]) -> list[Interval]:
    """Time covered by `first` but not `second` (both merged)."""
    result: list[Interval] = []
    j = 0
    for start, end in first:
        current = start
        while j < len(second) and second[j][1] <= current:
            j += 1
        k = j
        while k < len(second) and second[k][0] < end:
            if second[k][0] > current:
                result.append((current, second[k][0]))
            current = max(current, second[k][1])
            k += 1
        if current < end:
            result.append((current, end))
    return result


def clip(merged: list[Interval], start: float, end: float) -> list[Interval]:
    """The parts of `merged` inside [start, end]."""
    return intersect(merged, [(start, end)])
