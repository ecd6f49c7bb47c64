"""Reading a profiler trace: which rank wrote it, which events ran on the GPU, which on the
host, the profiler's steps; gzipped or not, decoded piece by piece however the file splits."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.observe.analysis import trace_reader
from scaletrain.observe.analysis.trace_reader import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    OTHER,
    RankTrace,
    read_trace,
    trace_names,
    trace_rank,
)
from tests.support.kineto_traces import CUDA, ROCM, TraceWriter, training_trace


def one_step(rank: int = 3) -> TraceWriter:
    writer = TraceWriter(ROCM, rank, 4)
    writer.host("ProfilerStep#7", 100.0, 900.0, "user_annotation")
    writer.host("ProfilerStep#6", 0.0, 100.0, "user_annotation")  # written out of order
    writer.host("aten::mm", 110.0, 20.0)
    writer.kernel(ROCM.gemm, launch_at=120, start=130, duration=50, stream=7)
    writer.events.append({"ph": "i", "cat": "cpu_op", "name": "marker", "ts": 5, "args": {}})
    return writer


def summary(trace: RankTrace) -> dict[str, object]:
    return {
        "rank": trace.rank,
        "steps": [(start, duration, step) for start, duration, step, _ in trace.steps],
        "host": [(trace.names[name], start) for start, _, name, _ in trace.host],
        "device": [(trace.names[name], start, duration)
                   for start, duration, name, _ in trace.device],
        "launches": [trace.names[name] for _, _, name, _ in trace.launches],
    }  # fmt: skip


def test_a_trace_as_the_analysis_sees_it(tmp_path: Path) -> None:
    trace = read_trace(one_step().write(tmp_path / "trace.json"))
    assert summary(trace) == {
        "rank": 3,  # from the header's distributedInfo, not the file name
        "steps": [(0.0, 100.0, 6), (100.0, 900.0, 7)],  # sorted by time
        "host": [("aten::mm", 110.0)],  # instant events ("ph": "i") are not durations
        "device": [(ROCM.gemm, 130.0, 50.0)],
        "launches": [ROCM.launch],
    }
    assert trace.has_device_events


def test_gzipped_and_split_anywhere_the_events_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = training_trace(CUDA, 1, 2, steps=3, kernels_per_step=12)
    plain = writer.write(tmp_path / "rank-1.pt.trace.json")
    packed = tmp_path / "rank-1.pt.trace.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    expected = summary(read_trace(plain))
    assert len(expected["device"]) > 36  # type: ignore[arg-type]
    assert summary(read_trace(packed)) == expected
    # Large traces are read 4 MB at a time; events cut at any boundary read the same.
    for chunk in (1, 7, 500):
        monkeypatch.setattr(trace_reader, "_CHUNK", chunk)
        assert summary(read_trace(plain)) == expected


def test_the_rank_from_the_header_or_else_the_file_name(tmp_path: Path) -> None:
    named = tmp_path / "worker_rank_12.json"
    named.write_text(json.dumps({"traceEvents": []}))
    assert trace_rank(named) == 12
    assert trace_rank(one_step(rank=5).write(tmp_path / "rank-9.json")) == 5
    nameless = tmp_path / "trace.json"
    nameless.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ScaletrainError, match="names no rank") as raised:
        trace_rank(nameless)
    assert "rank-<N>.pt.trace.json" in raised.value.hint


def test_files_that_are_not_whole_traces_are_one_clean_error(tmp_path: Path) -> None:
    other = tmp_path / "rank-0.json"
    other.write_text(json.dumps({"metrics": [1, 2, 3]}))
    with pytest.raises(ScaletrainError, match="has no traceEvents"):
        read_trace(other)
    cut = one_step(rank=0).write(tmp_path / "rank-1.json")
    cut.write_text(cut.read_text()[:-200])
    with pytest.raises(ScaletrainError, match="ends in the middle of an event"):
        read_trace(cut)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (CUDA.gemm, COMPUTE),
        (ROCM.gemm, COMPUTE),
        (CUDA.elementwise, COMPUTE),
        (CUDA.allreduce, COMMUNICATION),  # NCCL >= 2.19
        (ROCM.allreduce, COMMUNICATION),  # RCCL, NCCL < 2.19
        (CUDA.copy, MEMORY),
        ("Memset (Device)", MEMORY),
        ("dma_copy", MEMORY),
        ("cudaDeviceSynchronize", OTHER),
    ],
)
def test_what_each_device_event_is(name: str, kind: str) -> None:
    assert trace_names().device_kind(name) == kind
