"""The analysis as a user reads it: per-step times and shares, the top operators, the
straggler named; and the files it leaves in report/ for scripts and for the eye."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.observe.analysis.analyze import Analysis, analyze_traces
from scaletrain.observe.analysis.report import format_report, write_report
from tests.support.kineto_traces import gloo_trace


@pytest.fixture
def analysis(tmp_path: Path) -> Analysis:
    """Four gloo ranks; rank 2 starts every collective 200 µs late."""
    traces = tmp_path / "traces"
    for rank in range(4):
        gloo_trace(rank, 4, late_us=200 if rank == 2 else 0).write(traces / f"rank-{rank}.json")
    return analyze_traces(traces)


def test_the_text_report(analysis: Analysis) -> None:
    lines = format_report(analysis).splitlines()
    assert lines[0] == (
        f"Trace analysis of 4 rank(s) in {analysis.folder}/ (CPU (gloo)); ms per step and share "
        "of the analysed span:"
    )
    # 2 ms analysed over 2 steps: compute 1.45 ms, communication 0.45 (0.25 hidden), data
    # 0.2, idle 0.15; per step and as a share of the span.
    assert lines[3] == (
        "   0     2     1.00     0.72  72%     0.23  22%     0.12  12%     0.10  10%     "
        "0.10  10%     0.07   8%"
    )
    assert "Top operators by self time" in lines
    rank_0 = lines.index("  rank 0:")
    assert lines[rank_0 + 1] == "         1.10 ms  52%      2x  aten::mm"
    assert lines[-3:] == [
        "  rank 3: step 1.00 ms, starts collectives 0.00 ms after the first rank (3 collectives "
        "matched)",
        "  compute imbalance: 0.0% (slowest rank 0)",
        "  ! rank 2 starts collectives 0.20 ms after the median rank on average (20% of a 1.0 ms "
        "step): the others wait for it",
    ]


def test_a_balanced_run_says_so(tmp_path: Path) -> None:
    for rank in range(2):
        gloo_trace(rank, 2).write(tmp_path / f"rank-{rank}.json")
    assert format_report(analyze_traces(tmp_path)).endswith(
        "  no stragglers, no load imbalance above 10%\n"
    )


def test_the_report_files(analysis: Analysis, tmp_path: Path) -> None:
    written = write_report(analysis, tmp_path / "report")
    names = [path.name for path in written]
    assert names == ["analysis.txt", "analysis.json", "breakdown.png", "step-times.png"]
    assert (tmp_path / "report" / "analysis.txt").read_text() == format_report(analysis)
    record = json.loads((tmp_path / "report" / "analysis.json").read_text())
    first = record["breakdowns"][0]
    assert (first["rank"], first["compute_us"], first["non_compute_us"]) == (0, 1450.0, 400.0)
    assert first["overlap_ratio"] == pytest.approx(250 / 450)
    assert [entry["name"] for entry in record["top"]["2"]][:2] == ["aten::mm", "gloo:all_reduce"]
    assert record["stragglers"]["stragglers"] == [2]
    assert all(path.stat().st_size > 0 for path in written)
