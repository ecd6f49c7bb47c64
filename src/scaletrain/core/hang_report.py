"""The hang watchdog's numbers and its report (hang.json), shared by the training processes
(heartbeats), the watchdog, job scripts, `plan`, `status` and the doctor. No torch here.

When no rank finishes a step for the hang limit (the larger of --hang-limit, 5 minutes by
default, and 20 times the median step time), the watchdog collects every rank's Python stack,
names the ranks and nodes that stopped first in hang.json and ends the training step; the
job script sees HANG_EXIT_STATUS and requeues the job without the blamed nodes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scaletrain.core.errors import ScaletrainError

DEFAULT_HANG_LIMIT_S = 300.0
"""A few minutes: longer than a checkpoint save, an evaluation or a data-loader restart
usually take, far shorter than the collectives' own timeouts (NCCL 10 min, gloo 30 min)."""
STEP_TIME_MULTIPLE = 20
"""Slow steps raise the limit: never less than this many median steps."""
SAVE_LIMIT_FLOOR_MULTIPLE = 2
SAVE_TIME_MULTIPLE = 5
"""A checkpoint save is a hang after twice the limit, or five times the longest save so far:
saves of large models take minutes, and one that hangs in its collectives must still end."""
NOTICE_FRACTION = 0.5
"""At this fraction of the limit the watchdog reports who is behind, without ending anything."""
HANG_EXIT_STATUS = 75
"""Exit status of a training step the watchdog ended: EX_TEMPFAIL of sysexits.h ("try
again"), which neither Python, torchrun, srun nor a signal produces by itself."""


def hang_limit(floor_s: float, median_step_s: float | None) -> float:
    """The limit: `floor_s`, or STEP_TIME_MULTIPLE median steps when that is longer."""
    return max(floor_s, STEP_TIME_MULTIPLE * (median_step_s or 0.0))


def save_hang_limit(floor_s: float, longest_save_s: float | None) -> float:
    """The limit while a rank saves a checkpoint."""
    return max(SAVE_LIMIT_FLOOR_MULTIPLE * floor_s, SAVE_TIME_MULTIPLE * (longest_save_s or 0.0))


def parse_hang_limit(text: str) -> float:
    """Seconds from an option or variable value; 0 (or 'off') turns the watchdog off."""
    value = text.strip().lower()
    if value in ("off", "0", ""):
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ScaletrainError(
            f"--hang-limit {text!r} is not a number of seconds.",
            f"give seconds, e.g. --hang-limit {DEFAULT_HANG_LIMIT_S:.0f} (the default), or 0 "
            "to turn the hang watchdog off.",
        )
    return seconds


def beat_interval(floor_s: float) -> float:
    """How often each rank records its step: a thirtieth of the limit, within 0.5-10 s (a
    few file writes per minute per rank on a parallel file system)."""
    return min(10.0, max(0.5, floor_s / 30))


@dataclass(frozen=True, kw_only=True, slots=True)
class StoppedRank:
    """A rank the watchdog names, and why."""

    rank: int
    host: str
    why: str
    """e.g. 'network interface hsn0 is down', 'not in a collective: train.py:57 in step'."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HangReport:
    """hang.json: what the watchdog saw and did."""

    time: str
    """When the watchdog ended the step (ISO 8601, UTC)."""
    stalled_s: float
    """Seconds since the last rank finished a step."""
    limit_s: float
    step: int
    """The highest step any rank finished."""
    summary: str
    """One line for people: who stopped first and why."""
    stopped_first: list[StoppedRank] = field(default_factory=list)
    blamed_nodes: list[str] = field(default_factory=list)
    """Nodes to leave out of the next run: only nodes of the ranks that stopped first, and
    never all nodes of the job."""
    stacks: str = ""
    """The folder with every rank's stack dump, relative to the run folder."""
    answered: int = 0
    world_size: int = 0

    @property
    def exclude(self) -> str:
        """The blamed nodes as Slurm's --exclude wants them: n2,n5."""
        return ",".join(self.blamed_nodes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def write_hang_report(path: Path, report: HangReport) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)


def read_hang_report(path: Path) -> HangReport | None:
    """The report, or None when there is none (or it is unreadable: it is only advice)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data.pop("exclude", None)  # in older reports: the blamed nodes again, for sed
        stopped = [StoppedRank(**item) for item in data.pop("stopped_first", [])]
        return HangReport(stopped_first=stopped, **data)
    except (OSError, ValueError, TypeError):
        return None
