"""A run's Slurm history: runs/<name>/jobs.jsonl, one JSON object per line, only appended.

    {"event": "submitted", "job_id": "123", "time": "2026-11-23T07:46:50+00:00", ...}

Events are "submitted" (scaletrain), "requeued" (the job script, after a graceful stop) and
"cancelled" (scaletrain cancel). The newest "submitted" line names the run's current job.
Lines are never rewritten, so a crash while appending can lose at most the line being written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.run_folder import RunFolder

# What sbatch --parsable prints (12345), and array or heterogeneous job parts (12345_7).
_JOB_ID = re.compile(r"[0-9]+(?:[_+][0-9]+)?")

EventKind = Literal["submitted", "requeued", "cancelled"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobEvent:
    """One line of jobs.jsonl."""

    event: str
    """submitted, requeued or cancelled (newer versions may add kinds; they are kept)."""
    job_id: str
    time: str
    """When it happened: ISO-8601 in UTC."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """The line's optional fields (e.g. restart count, signal), as written."""


def record_job_event(
    folder: RunFolder,
    event: EventKind,
    job_id: str,
    *,
    now: datetime | None = None,
    **details: Any,
) -> JobEvent:
    """Append one event to the run's jobs.jsonl (created with the run folder if missing)."""
    if event not in EVENT_KINDS:
        raise ValueError(f"unknown job event {event!r}; expected one of {EVENT_KINDS}")
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    record = JobEvent(
        event=event, job_id=job_id, time=moment.isoformat(timespec="seconds"), details=details
    )
    folder.root.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"event": event, "job_id": job_id, "time": record.time, **details})
    # One write of one whole line in append mode: concurrent writers (a requeueing job script
    # and `scaletrain cancel`) never interleave inside a line.
    with folder.jobs_log.open("a", encoding="utf-8") as log:
        log.write(line + "\n")
    return record


def read_job_events(folder: RunFolder) -> tuple[JobEvent, ...]:
    """Every event of the run, oldest first; () when it was never submitted."""
    if not folder.jobs_log.exists():
        return ()
    events = []
    # A damaged byte spoils its line only: that line is reported below, the others are read.
    lines = read_text(folder.jobs_log, "job history", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if line.strip():
            events.append(_parse_line(line, folder, number, is_last=number == len(lines)))
    return tuple(event for event in events if event is not None)


def _parse_line(line: str, folder: RunFolder, number: int, *, is_last: bool) -> JobEvent | None:
    try:
        record = json.loads(line)
        event = JobEvent(
            event=str(record.pop("event")),
            job_id=str(record.pop("job_id")),
            time=str(record.pop("time")),
            details=record,
        )
        if not _JOB_ID.fullmatch(event.job_id):
            raise ValueError(f"{event.job_id!r} is not a Slurm job id")
        return event
    except (json.JSONDecodeError, KeyError, AttributeError, TypeError, ValueError):
        if is_last and not line.endswith("}"):
            return None  # a line cut short by a crash while appending; the rest is intact
        raise ScaletrainError(
            f"Line {number} of {folder.jobs_log} is not a job record: {line[:120]!r}.",
            'each line must be a JSON object with "event", "job_id" and "time"; '
            "fix or remove that line (the other lines are kept as they are).",
        ) from None


def current_job(events: Sequence[JobEvent]) -> JobEvent | None:
    """The newest submission: the job that status, logs and cancel act on."""
    return next((event for event in reversed(events) if event.event == "submitted"), None)


def requeue_count(events: Sequence[JobEvent], job_id: str) -> int:
    """How often the job script reported requeueing this job."""
    return sum(1 for event in events if event.event == "requeued" and event.job_id == job_id)


def job_output_file(folder: RunFolder, job_id: str) -> Path | None:
    """The newest Slurm output file of the job in the run's logs/ (named %x-%j.out)."""
    if not folder.logs.is_dir():
        return None
    # The job id as a whole number in the name: job 12 must not match train-123.out.
    pattern = re.compile(rf"(?<![0-9]){re.escape(job_id)}(?![0-9])")
    candidates = [
        path for path in folder.logs.iterdir() if path.is_file() and pattern.search(path.name)
    ]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)
