"""Where one rank's time went, on traces whose every number is worked out by hand: a CPU-only
(gloo) rank (tests/support/kineto_traces.py: gloo_trace) and GPU kernels around the
profiler's last step, which HTA leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.observe.analysis.breakdown import (
    Breakdown,
    breakdown,
    cpu_span,
    kept_device_events,
    top_entries,
)
from scaletrain.observe.analysis.trace_reader import RankTrace, read_trace
from tests.support.kineto_traces import CUDA, DATA, TraceWriter, gloo_trace


def traced(writer: TraceWriter, folder: Path) -> RankTrace:
    return read_trace(writer.write(folder / f"rank-{writer.rank}.pt.trace.json"))


def test_a_gloo_rank_split_into_compute_communication_data_and_idle(tmp_path: Path) -> None:
    result = breakdown(traced(gloo_trace(1, 2), tmp_path))
    assert result == Breakdown(
        rank=1, device="cpu", span_us=2000.0, steps=2, compute_us=1450.0,
        communication_us=450.0, overlap_us=250.0, memory_us=0.0, data_loading_us=200.0,
        idle_us=150.0,
    )  # fmt: skip
    # What the report derives: 200 µs of communication nothing hid, 400 µs neither compute
    # nor idle (communication, data loading), 250 of 450 µs of communication overlapped.
    assert result.exposed_communication_us == 200.0
    assert result.non_compute_us == 400.0
    assert result.overlap_ratio == pytest.approx(250 / 450)


def test_the_top_operators_by_self_time(tmp_path: Path) -> None:
    top = top_entries(traced(gloo_trace(0, 2), tmp_path))
    # aten::linear ran 500 µs but 400 of them inside aten::mm: its own time is 100 µs.
    # Step 3 (after the analysed span) and the step markers are not counted.
    assert [(entry.name, entry.count, entry.total_us) for entry in top] == [
        ("aten::mm", 2, 1100.0),
        ("gloo:all_reduce", 2, 430.0),
        ("aten::add", 1, 250.0),
        (DATA, 2, 200.0),
        ("aten::linear", 1, 100.0),
        ("c10d::allreduce_", 1, 50.0),
    ]
    assert [entry.name for entry in top_entries(traced(gloo_trace(0, 2), tmp_path), 2)] == [
        "aten::mm",
        "gloo:all_reduce",
    ]


def test_the_analysed_span_is_every_profiled_step_but_the_last(tmp_path: Path) -> None:
    assert cpu_span(traced(gloo_trace(0, 1), tmp_path)) == (0.0, 2000.0)
    one_step = TraceWriter(CUDA, 0, 1)
    one_step.host("ProfilerStep#4", 500.0, 300.0, "user_annotation")
    one_step.host("aten::mm", 520.0, 100.0)
    assert cpu_span(traced(one_step, tmp_path)) == (500.0, 800.0)
    no_steps = TraceWriter(CUDA, 0, 1)
    no_steps.host("aten::mm", 40.0, 10.0)
    no_steps.host("aten::add", 10.0, 5.0)
    assert cpu_span(traced(no_steps, tmp_path)) == (10.0, 50.0)


def test_kernels_launched_in_the_last_step_are_left_out_as_hta_does(tmp_path: Path) -> None:
    writer = TraceWriter(CUDA, 0, 1)
    for step in (1, 2):
        writer.host(f"ProfilerStep#{step}", 1000.0 * (step - 1), 1000.0, "user_annotation")
    writer.kernel(CUDA.gemm, launch_at=900, start=950, duration=200, stream=7)  # runs into step 2
    writer.kernel(CUDA.gemm, launch_at=1010, start=1020, duration=100, stream=7)
    writer.kernel(CUDA.allreduce, launch_at=990, start=1100, duration=300, stream=20)
    trace = traced(writer, tmp_path)
    assert [event[0] for event in kept_device_events(trace)] == [950.0, 1100.0]
    result = breakdown(trace)
    # span = first kept kernel start to last kept end: 950 -> 1400; busy 950-1150, 1100-1400
    assert (result.device, result.span_us, result.steps) == ("gpu", 450.0, 1)
    assert (result.compute_us, result.communication_us, result.overlap_us) == (200.0, 300.0, 50.0)
    assert result.idle_us == 0.0
    # The GPU top list counts kernels by total time, the cut-off one included in none.
    assert [(e.name, e.total_us) for e in top_entries(trace)] == [
        (CUDA.allreduce, 300.0),
        (CUDA.gemm, 200.0),
    ]
