"""Shared by the benchmarks: where results go and how repeated timings are summarized."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of repeated measurements (2 shared cores: report the spread)."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "repeats": len(values),
    }


def save(name: str, record: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
