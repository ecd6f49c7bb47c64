"""The progress line of a training run, shared by rank 0's console and `scaletrain status`.

Rank 0 prints it and appends the same values to metrics/train.jsonl; status rebuilds the
line from that file's last record. No torch here: status runs on login nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

# Keys of a train.jsonl record that are not user metrics; metrics print between epoch and rate.
_BOOKKEEPING = (
    "step",
    "total_steps",
    "epoch",
    "samples_per_s",
    "tokens_per_s",
    "elapsed_s",
    "eta_s",
    "time",
)

# The last line of a metrics file is within this many bytes of its end (a line is ~200 bytes).
_TAIL_BYTES = 64 * 1024


def format_value(value: float | list[float]) -> str:
    """Whole numbers without decimals, others with 4 significant digits; lists (one value per
    rank) comma-separated."""
    if isinstance(value, list):
        return ", ".join(format_value(item) for item in value)
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def format_duration(seconds: float) -> str:
    """H:MM:SS (with days when longer)."""
    return str(timedelta(seconds=round(seconds)))


def format_progress_line(record: Mapping[str, Any]) -> str:
    """`step 4/92 4% | epoch 0 | loss 2.309 | 1,642 samples/s | elapsed 0:00:00 eta 0:00:03`."""
    step, total = record["step"], record.get("total_steps")
    if total:
        width = len(str(total))
        parts = [f"step {step:>{width}}/{total} {step / total:4.0%}"]
    else:
        parts = [f"step {step}"]
    if record.get("epoch") is not None:
        parts.append(f"epoch {record['epoch']}")
    parts += [
        f"{name} {format_value(value)}"
        for name, value in record.items()
        if name not in _BOOKKEEPING and isinstance(value, int | float)
    ]
    parts.append(f"{record['samples_per_s']:,.0f} samples/s")
    if "tokens_per_s" in record:
        parts.append(f"{record['tokens_per_s']:,.0f} tokens/s")
    timing = f"elapsed {format_duration(record['elapsed_s'])}"
    if "eta_s" in record:
        timing += f" eta {format_duration(record['eta_s'])}"
    parts.append(timing)
    return " | ".join(parts)


def last_progress_line(metrics_file: Path) -> str | None:
    """The progress line of the last complete record in train.jsonl; None if there is none."""
    if not metrics_file.is_file():
        return None
    with metrics_file.open("rb") as file:
        file.seek(max(0, file.seek(0, 2) - _TAIL_BYTES))
        tail = file.read().decode("utf-8", errors="replace")
    for line in reversed(tail.splitlines()):
        try:
            return format_progress_line(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line being written right now, or cut by the tail window
    return None
