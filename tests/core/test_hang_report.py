"""The hang watchdog's numbers and its report file."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.hang_report import (
    HangReport,
    StoppedRank,
    beat_interval,
    hang_limit,
    parse_hang_limit,
    read_hang_report,
    write_hang_report,
)


def test_the_limit_is_the_larger_of_the_floor_and_twenty_median_steps() -> None:
    assert hang_limit(300, None) == 300
    assert hang_limit(300, 2.0) == 300  # 40 s of steps: the floor
    assert hang_limit(300, 30.0) == 600  # slow steps raise it


@pytest.mark.parametrize(("text", "seconds"), [("300", 300), ("12.5", 12.5), ("0", 0), ("off", 0)])
def test_limit_values(text: str, seconds: float) -> None:
    assert parse_hang_limit(text) == seconds


@pytest.mark.parametrize("text", ["5m", "-3", "soon"])
def test_a_limit_that_is_no_number_of_seconds_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(ScaletrainError, match="is not a number of seconds") as error:
        parse_hang_limit(text)
    assert "--hang-limit 300" in error.value.hint


def test_heartbeats_are_a_thirtieth_of_the_limit_within_bounds() -> None:
    assert beat_interval(300) == 10
    assert beat_interval(60) == 2
    assert beat_interval(3) == 0.5


def test_the_report_round_trips_and_names_the_nodes_to_exclude(tmp_path: Path) -> None:
    report = HangReport(
        time="2026-11-23T17:08:33.000+00:00",
        stalled_s=20.4,
        limit_s=20.0,
        step=154,
        summary="rank 1 on n2 has its network interface hsn0 down",
        stopped_first=[StoppedRank(rank=1, host="n2", why="has its network interface hsn0 down")],
        blamed_nodes=["n2", "n5"],
        stacks="stacks/x",
        answered=4,
        world_size=4,
    )
    path = tmp_path / "hang.json"
    write_hang_report(path, report)
    assert read_hang_report(path) == report
    path.write_text("{not json")
    assert read_hang_report(path) is None
