"""A folder of rank traces analysed as a whole: every rank's breakdown and top list in rank
order, stragglers across them; and the folders that cannot be analysed, each one clean error."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.observe.analysis.analyze import analyze_traces, trace_files
from tests.support.kineto_traces import gloo_trace


def test_every_rank_of_a_folder_in_rank_order(tmp_path: Path) -> None:
    for rank in (2, 0, 1):  # written in any order, named in any of the profiler's ways
        writer = gloo_trace(rank, 3, late_us=300 if rank == 1 else 0)
        text = writer.write(tmp_path / "t").read_bytes()
        name = {0: "rank-0.pt.trace.json", 1: "host_1.pt.trace.json.gz", 2: "worker2.json"}[rank]
        (tmp_path / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    (tmp_path / "t").unlink()
    (tmp_path / "notes.txt").write_text("not a trace")
    analysis = analyze_traces(tmp_path)
    assert analysis.folder == tmp_path
    assert [b.rank for b in analysis.breakdowns] == [0, 1, 2]  # ranks from each file's header
    assert [b.compute_us for b in analysis.breakdowns] == [1450.0] * 3
    assert sorted(analysis.top) == [0, 1, 2] and analysis.top[0][0].name == "aten::mm"
    assert analysis.stragglers.stragglers == (1,)


def test_the_newest_trace_format_and_the_old_names_are_found(tmp_path: Path) -> None:
    for name in ("a.pt.trace.json", "b.pt.trace.json.gz", "c.json", "d.json.gz", "e.txt"):
        (tmp_path / name).write_text("")
    assert [path.name for path in trace_files(tmp_path)] == [
        "a.pt.trace.json",
        "b.pt.trace.json.gz",
        "c.json",
        "d.json.gz",
    ]


def test_a_folder_without_traces_says_how_to_make_them(tmp_path: Path) -> None:
    with pytest.raises(ScaletrainError, match="There are no profiler traces") as raised:
        analyze_traces(tmp_path)
    assert "--profile all" in raised.value.hint


def test_two_traces_of_one_rank_are_refused(tmp_path: Path) -> None:
    gloo_trace(0, 1).write(tmp_path / "rank-0.pt.trace.json")
    gloo_trace(0, 1).write(tmp_path / "older" / "rank-0.pt.trace.json").rename(
        tmp_path / "rank-0-old.json"
    )
    with pytest.raises(ScaletrainError, match="more than one trace of the same rank") as raised:
        analyze_traces(tmp_path)
    assert "one trace per rank" in raised.value.hint
