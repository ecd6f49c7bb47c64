"""Slurm time limits (`--time`): parse what sbatch accepts, print what its examples show."""

from __future__ import annotations

import re

from scaletrain.core.errors import ScaletrainError

# sbatch accepts "M", "M:S", "H:M:S", "D-H", "D-H:M" and "D-H:M:S" (man sbatch, --time).
_WITH_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")
_WITHOUT_DAYS = re.compile(r"^(\d+)(?::(\d+))?(?::(\d+))?$")

_MINUTE = 60
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR


def parse_slurm_time(text: str) -> int:
    """Seconds in a Slurm time limit such as `2:00:00`, `30`, or `3-00:00:00`."""
    value = text.strip()
    with_days = _WITH_DAYS.match(value)
    if with_days:
        days, hours, minutes, seconds = (int(part or 0) for part in with_days.groups())
        total = days * _DAY + hours * _HOUR + minutes * _MINUTE + seconds
    else:
        without_days = _WITHOUT_DAYS.match(value)
        if without_days is None:
            raise ScaletrainError(
                f"{text!r} is not a Slurm time limit.",
                "write HH:MM:SS (2:00:00), D-HH:MM:SS (3-00:00:00) or minutes (30).",
            )
        parts = [int(part) for part in without_days.groups() if part is not None]
        # One number is minutes, two are minutes:seconds, three are hours:minutes:seconds.
        weights = {1: (_MINUTE,), 2: (_MINUTE, 1), 3: (_HOUR, _MINUTE, 1)}[len(parts)]
        total = sum(part * weight for part, weight in zip(parts, weights, strict=True))
    if total <= 0:
        raise ScaletrainError(
            f"The time limit {text!r} is zero.",
            "ask for the wall time the job needs, e.g. 2:00:00.",
        )
    return total


def minutes_seconds_warning(text: str) -> str | None:
    """A warning when Slurm reads `text` as minutes:seconds (`1:00` is one minute, where
    people often mean an hour); None for every other spelling."""
    value = text.strip()
    parts = _WITHOUT_DAYS.match(value)
    if parts is None or parts.group(2) is None or parts.group(3) is not None:
        return None
    minutes, seconds = int(parts.group(1)), int(parts.group(2))
    total = minutes * _MINUTE + seconds
    return (
        f"Slurm reads --time {value} as minutes:seconds, {format_slurm_time(total)} "
        f"({describe_duration(total)}); for {minutes} hour(s) write --time "
        f"{minutes}:{seconds:02d}:00."
    )


def format_slurm_time(seconds: int) -> str:
    """`1:00:00` below a day, `2-00:00:00` from a day on, as in the sites' sbatch examples."""
    days, rest = divmod(seconds, _DAY)
    hours, rest = divmod(rest, _HOUR)
    minutes, secs = divmod(rest, _MINUTE)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}"


def describe_duration(seconds: int) -> str:
    """Plain words for a limit: `3 days`, `15 minutes`, `36 hours`."""
    for size, unit in ((_DAY, "day"), (_HOUR, "hour"), (_MINUTE, "minute")):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return format_slurm_time(seconds)
