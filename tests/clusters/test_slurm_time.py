"""Slurm time limits: every form sbatch accepts, printed as the sites' examples print them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scaletrain.clusters.slurm_time import describe_duration, format_slurm_time, parse_slurm_time
from scaletrain.core.errors import ScaletrainError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("15:00", 900),
        ("2:00:00", 7200),
        ("1-12", 36 * 3600),
        ("1-12:30", 36 * 3600 + 1800),
        ("3-00:00:00", 3 * 86400),
    ],
)
def test_parses_sbatch_forms(text: str, seconds: int) -> None:
    assert parse_slurm_time(text) == seconds


@pytest.mark.parametrize("text", ["", "two hours", "1:2:3:4", "0", "0:00:00", "-1"])
def test_rejects_what_sbatch_rejects(text: str) -> None:
    with pytest.raises(ScaletrainError, match=r"HH:MM:SS|zero"):
        parse_slurm_time(text)


def test_prints_like_the_examples() -> None:
    assert format_slurm_time(3600) == "1:00:00"
    assert format_slurm_time(2 * 86400) == "2-00:00:00"
    assert describe_duration(15 * 60) == "15 minutes"
    assert describe_duration(36 * 3600) == "36 hours"
    assert describe_duration(86400) == "1 day"


@given(st.integers(min_value=1, max_value=400 * 86400))
def test_format_and_parse_round_trip(seconds: int) -> None:
    assert parse_slurm_time(format_slurm_time(seconds)) == seconds
