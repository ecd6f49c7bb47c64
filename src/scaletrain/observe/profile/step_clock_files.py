"""Reading the step clock's files (metrics/steps-rank-<R>.json) without torch."""

from __future__ import annotations

import json
from pathlib import Path

STEPS_FILE_PREFIX = "steps-rank-"


def steps_file(metrics: Path, rank: int) -> Path:
    return metrics / f"{STEPS_FILE_PREFIX}{rank}.json"


def read_step_ends(metrics: Path) -> dict[int, list[float]]:
    """rank -> times (s since the epoch) at which each optimizer step ended."""
    found = {}
    for path in sorted(metrics.glob(f"{STEPS_FILE_PREFIX}*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        found[int(record["rank"])] = [float(end) for end in record["step_ends"]]
    return found
