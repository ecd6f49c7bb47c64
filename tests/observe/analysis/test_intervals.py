"""Interval arithmetic behind compute, overlap and idle time: worked examples, and every
operation checked against the same question asked of single microseconds (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from scaletrain.observe.analysis.intervals import (
    Interval,
    clip,
    intersect,
    length,
    merge,
    subtract,
)


def test_worked_examples() -> None:
    # Unsorted, overlapping, touching and nested intervals become one sorted union.
    assert merge([(5, 7), (0, 2), (1, 3), (3, 4), (5, 6)]) == [(0, 4), (5, 7)]
    assert length([(0, 4), (5, 7)]) == 6
    compute, communication = [(0, 10), (20, 30)], [(8, 22), (40, 50)]
    assert intersect(communication, compute) == [(8, 10), (20, 22)]  # hidden behind compute
    assert subtract(communication, compute) == [(10, 20), (40, 50)]  # exposed
    assert subtract(compute, [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10), (20, 30)]
    assert clip([(0, 10), (20, 30)], 5, 25) == [(5, 10), (20, 25)]
    assert merge([]) == [] and length([]) == 0 and intersect([], compute) == []


def microseconds(intervals: list[Interval]) -> set[int]:
    """Each whole microsecond [t, t + 1) the intervals cover."""
    return {t for start, end in intervals for t in range(int(start), int(end))}


bounds = st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda p: (p[0], p[0] + p[1]))
interval_lists = st.lists(bounds, max_size=12)


@given(interval_lists)
def test_merge_covers_the_same_time_once(intervals: list[Interval]) -> None:
    merged = merge(intervals)
    assert microseconds(merged) == microseconds(intervals)
    assert length(merged) == len(microseconds(intervals))
    # sorted, and apart: no two touch or overlap
    assert all(a[1] < b[0] for a, b in itertools.pairwise(merged))


@given(interval_lists, interval_lists)
def test_intersect_and_subtract_are_set_operations(
    first: list[Interval], second: list[Interval]
) -> None:
    a, b = merge(first), merge(second)
    assert microseconds(intersect(a, b)) == microseconds(a) & microseconds(b)
    assert microseconds(subtract(a, b)) == microseconds(a) - microseconds(b)
    # what overlaps plus what does not is everything, counted once
    assert length(intersect(a, b)) + length(subtract(a, b)) == length(a)


@given(interval_lists, st.integers(0, 80), st.integers(0, 80))
def test_clip_keeps_what_is_inside(intervals: list[Interval], start: int, end: int) -> None:
    inside = set(range(start, end))
    assert microseconds(clip(merge(intervals), start, end)) == microseconds(intervals) & inside
