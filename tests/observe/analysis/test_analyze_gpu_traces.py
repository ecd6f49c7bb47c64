"""`scaletrain analyze` on GPU traces written in PyTorch's format for CUDA and ROCm, where
every number can be worked out by hand (no GPU here; the same reader runs on real traces)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import scaletrain
from tests.support.kineto_traces import CUDA, ROCM, TraceWriter, Vendor

COMPUTE, COMM = 7, 20


def step_trace(vendor: Vendor, rank: int, late_us: float) -> TraceWriter:
    """Three 1000 µs steps; the last is left out of the analysis (as HTA does).

    step 1: compute [100, 300] and [600, 700], all_reduce [250, 450], a copy [500, 550]
    step 2: compute [1100, 1400], all_reduce [1300, 1350] (hidden behind compute)
    step 3: compute [2100, 2500], not counted
    """
    trace = TraceWriter(vendor, rank, 2)
    for step in (1, 2, 3):
        trace.host(f"ProfilerStep#{step}", 1000.0 * (step - 1), 1000.0, "user_annotation")
    trace.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000, 90,
               "user_annotation")  # fmt: skip
    trace.kernel(vendor.gemm, 10, 100, 200, COMPUTE)
    trace.host("nccl:all_reduce", 20 + late_us, 5, "user_annotation")
    trace.kernel(vendor.allreduce, 20, 250, 200, COMM)
    trace.kernel(vendor.copy, 30, 500, 50, COMPUTE, "gpu_memcpy")
    trace.kernel(vendor.elementwise, 40, 600, 100, COMPUTE)
    trace.kernel(vendor.gemm, 1010, 1100, 300, COMPUTE)
    trace.host("nccl:all_reduce", 1020 + late_us, 5, "user_annotation")
    trace.kernel(vendor.allreduce, 1020, 1300, 50, COMM)
    trace.kernel(vendor.gemm, 2010, 2100, 400, COMPUTE)
    return trace


@pytest.mark.parametrize("vendor", [CUDA, ROCM], ids=["cuda", "rocm"])
def test_breakdown_of_known_gpu_traces(vendor: Vendor, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    step_trace(vendor, 0, 0).write(traces / "rank-0.pt.trace.json")
    # rank 1 arrives 200 µs late at each collective, and its trace is gzipped
    text = step_trace(vendor, 1, 200).write(tmp_path / "rank-1.pt.trace.json").read_bytes()
    (traces / "rank-1.pt.trace.json.gz").write_bytes(gzip.compress(text))

    result = scaletrain("analyze", "--traces", str(traces), cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    report = json.loads((traces / "report" / "analysis.json").read_text())
    for rank in report["breakdowns"]:
        assert rank["device"] == "gpu"
        assert rank["span_us"] == 1300  # first kernel start 100 to last counted end 1400
        assert rank["compute_us"] == 600
        assert rank["communication_us"] == 250
        assert rank["overlap_us"] == 100 and rank["overlap_ratio"] == pytest.approx(0.4)
        assert rank["memory_us"] == 50
        assert rank["idle_us"] == 500  # gaps 450-500, 550-600, 700-1100
        assert rank["non_compute_us"] == 200
        assert rank["data_loading_us"] == 90
    late = {t["rank"]: t["mean_lateness_us"] for t in report["stragglers"]["timings"]}
    assert late == {0: 0.0, 1: 200.0}
    assert report["stragglers"]["stragglers"] == [1]
    # What the user reads: per-step times and the straggler named.
    assert "   0     2     0.65     0.30  46%" in result.stdout
    assert "rank 1: step 1.00 ms, starts collectives 0.20 ms after the first rank" in result.stdout
    # 2 ranks: the median lateness is 100 µs, rank 1 is 100 µs (10% of a step) behind it
    assert "! rank 1 starts collectives 0.10 ms after the median rank" in result.stdout
    assert vendor.gemm in result.stdout  # top kernels
    assert (traces / "report" / "breakdown.png").stat().st_size > 0


def test_a_cut_off_trace_is_one_clean_error(tmp_path: Path) -> None:
    path = step_trace(CUDA, 0, 0).write(tmp_path / "traces" / "rank-0.pt.trace.json")
    path.write_text(path.read_text()[:-300])
    result = scaletrain("analyze", "--traces", str(path.parent), cwd=tmp_path)
    assert result.returncode == 2
    assert "ends in the middle of an event" in result.stderr and "HINT:" in result.stderr
