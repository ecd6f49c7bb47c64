"""Which rank the others wait for, and which computes longer than the rest: on gloo ranks
whose collectives start a known time late (tests/support/kineto_traces.py: gloo_trace)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scaletrain.observe.analysis.breakdown import breakdown
from scaletrain.observe.analysis.stragglers import Stragglers, find_stragglers
from scaletrain.observe.analysis.trace_reader import read_trace
from tests.support.kineto_traces import gloo_trace


def ranks_late_by(late_us: list[float], folder: Path) -> Stragglers:
    """Ranks 0..n-1, rank r starting each collective late_us[r] after the step's start."""
    traces = [
        read_trace(gloo_trace(rank, len(late_us), late_us=late).write(folder / f"rank-{rank}.json"))
        for rank, late in enumerate(late_us)
    ]
    return find_stragglers(traces, [breakdown(trace) for trace in traces])


def test_the_rank_that_starts_collectives_late_is_the_straggler(tmp_path: Path) -> None:
    found = ranks_late_by([0, 0, 200, 0], tmp_path)
    assert found.stragglers == (2,)
    late = {timing.rank: timing.mean_lateness_us for timing in found.timings}
    assert late == {0: 0.0, 1: 0.0, 2: 200.0, 3: 0.0}
    assert all(timing.collectives == 3 for timing in found.timings)
    # Two profiled steps of 1000 µs each; the third ends with the profile and is left out.
    assert all(timing.step_times_us == (1000.0, 1000.0) for timing in found.timings)
    assert found.findings == (
        "rank 2 starts collectives 0.20 ms after the median rank on average (20% of a 1.0 ms "
        "step): the others wait for it",
    )


def test_lateness_is_measured_from_the_median_rank(tmp_path: Path) -> None:
    # Every rank but rank 0 is 300 µs late: rank 0 is early, nobody waits for the others.
    found = ranks_late_by([0, 300, 300, 300], tmp_path)
    assert found.stragglers == () and found.findings == ()


def test_a_few_percent_of_a_step_is_not_a_straggler(tmp_path: Path) -> None:
    # Of two ranks the median lies halfway: 80 µs late is 40 µs (4% of the 1000 µs step)
    # behind it, below the 5% threshold; 120 µs late is 60 µs (6%) behind.
    found = ranks_late_by([0, 80], tmp_path)
    assert found.stragglers == () and found.findings == ()
    assert ranks_late_by([0, 120], tmp_path / "more").stragglers == (1,)


def test_one_rank_is_never_its_own_straggler(tmp_path: Path) -> None:
    found = ranks_late_by([500], tmp_path)
    assert found.stragglers == () and found.imbalance == 0.0


def test_a_rank_computing_longer_than_the_rest_is_load_imbalance(tmp_path: Path) -> None:
    traces = [
        read_trace(gloo_trace(rank, 4).write(tmp_path / f"rank-{rank}.json")) for rank in range(4)
    ]
    breakdowns = [breakdown(trace) for trace in traces]
    # Rank 3 computes 1.5x as long as the others (uneven batches, a slower node).
    breakdowns[3] = dataclasses.replace(breakdowns[3], compute_us=1.5 * breakdowns[3].compute_us)
    found = find_stragglers(traces, breakdowns)
    assert found.slowest_compute_rank == 3
    assert found.imbalance == pytest.approx(1 / 3)  # (1.5 - mean 1.125) / 1.125
    assert found.findings == (
        "load imbalance: rank 3 computes 33% longer than the mean rank; uneven batches or "
        "sequence lengths, or a slower device or node",
    )
    # 5% more is below the 10% threshold.
    breakdowns[3] = dataclasses.replace(breakdowns[3], compute_us=1.05 * breakdowns[0].compute_us)
    assert find_stragglers(traces, breakdowns).findings == ()
