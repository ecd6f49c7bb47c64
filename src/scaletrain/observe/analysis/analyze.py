"""`scaletrain analyze`: a run's traces (or any folder of them) -> breakdown, top list,
stragglers. Ranks are read one after another, so memory holds one rank's events at a time
beyond the small per-rank results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scaletrain.core.errors import ScaletrainError
from scaletrain.observe.analysis.breakdown import Breakdown, TopEntry, breakdown, top_entries
from scaletrain.observe.analysis.stragglers import Stragglers, find_stragglers
from scaletrain.observe.analysis.trace_reader import RankTrace, Rows, read_trace, trace_names

TRACE_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz", "*.json", "*.json.gz")


@dataclass(frozen=True, kw_only=True, slots=True)
class Analysis:
    folder: Path
    breakdowns: tuple[Breakdown, ...]
    top: dict[int, tuple[TopEntry, ...]]
    stragglers: Stragglers


def trace_files(folder: Path) -> list[Path]:
    """The rank traces in `folder` (the newest per rank when a rank wrote several)."""
    found = {path for pattern in TRACE_PATTERNS for path in folder.glob(pattern)}
    if not found:
        raise ScaletrainError(
            f"There are no profiler traces in {folder}/.",
            "profile the run first: scaletrain run/submit --profile all ..., or "
            "st.profile(...) in the script.",
        )
    return sorted(found)


def analyze_traces(folder: Path) -> Analysis:
    traces: list[RankTrace] = []
    breakdowns, top = [], {}
    for path in trace_files(folder):
        trace = read_trace(path)
        breakdowns.append(breakdown(trace))
        top[trace.rank] = tuple(top_entries(trace))
        # Keep steps and collective starts for the straggler search, drop the rest.
        trace.host = trace.host.keep(_is_collective(trace))
        trace.device, trace.launches = Rows(), Rows()
        traces.append(trace)
    ranks = [b.rank for b in breakdowns]
    if len(set(ranks)) != len(ranks):
        raise ScaletrainError(
            f"{folder}/ holds more than one trace of the same rank.",
            "keep one trace per rank there (move older profiles to another folder).",
        )
    return Analysis(
        folder=folder,
        breakdowns=tuple(sorted(breakdowns, key=lambda b: b.rank)),
        top=top,
        stragglers=find_stragglers(traces, breakdowns),
    )


def _is_collective(trace: RankTrace) -> Callable[[int], bool]:
    collective, names = trace_names().collective, trace.names
    return lambda name_id: collective.match(names[name_id]) is not None
