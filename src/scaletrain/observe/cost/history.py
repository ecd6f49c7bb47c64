"""A run's training history as `scaletrain cost` needs it: when each step was reached, and
where each start of the training processes resumed.

metrics/train.jsonl (st.Progress, rank 0) holds one record per report with the step, the
seconds since that Progress began (`elapsed_s`) and the wall-clock `time`; a new start of the
processes begins a new Progress, so `elapsed_s` falls and the steps begin again. resumes.jsonl
(checkpoint/stop.py, `record_resume`) has one line each time training resumed: when, at which
step.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# A resume is written just before its Progress begins, to the whole second (the time's
# fraction is cut): a resume up to this many seconds after the Progress's start is its own.
_RESUME_SLACK_S = 1.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    """One record of train.jsonl: a step and when it ended."""

    step: int
    time: float
    """Seconds since the epoch."""
    elapsed_s: float
    """Seconds since this start's Progress began."""
    epoch: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Resume:
    """One line of resumes.jsonl: training went on from `step` at `time`."""

    step: int
    time: float


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingStart:
    """One start of the training processes: the job's first, a requeue's, or a restart's
    (torchrun --max-restarts), and the steps it reported."""

    begin: float
    """When it resumed, or when its Progress began if it did not resume."""
    from_step: int
    """The step it resumed from; 0 if it started afresh."""
    records: tuple[StepRecord, ...]

    @property
    def last_step(self) -> int:
        return self.records[-1].step

    @property
    def progress_began(self) -> float:
        return self.records[0].time - self.records[0].elapsed_s

    def time_at(self, step: int) -> float:
        """When this start reached `step`: straight between the records around it (reports
        may come every few steps), at the start's mean pace past its last record."""
        points = [(self.from_step, self.progress_began)]
        points += [(record.step, record.time) for record in self.records]
        if step <= points[0][0]:
            return points[0][1]
        steps = [point[0] for point in points]
        index = bisect_left(steps, step)
        if index == len(points):
            (first_step, first_time), (last_step, last_time) = points[0], points[-1]
            pace = (last_time - first_time) / max(last_step - first_step, 1)
            return last_time + (step - last_step) * pace
        (before_step, before), (after_step, after) = points[index - 1], points[index]
        return before + (after - before) * (step - before_step) / (after_step - before_step)


def read_step_records(path: Path) -> list[StepRecord]:
    """Every complete record of train.jsonl with a time (records of older versions have none)."""
    records = []
    for data in _json_lines(path):
        try:
            epoch = data.get("epoch")
            records.append(
                StepRecord(
                    step=int(data["step"]),
                    time=float(data["time"]),
                    elapsed_s=float(data["elapsed_s"]),
                    epoch=int(epoch) if isinstance(epoch, int) else None,
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return records


def read_resumes(path: Path) -> list[Resume]:
    """Every line of resumes.jsonl: its step and time."""
    resumes = []
    for data in _json_lines(path):
        try:
            moment = datetime.fromisoformat(str(data["time"])).timestamp()
            resumes.append(Resume(step=int(data["step"]), time=moment))
        except (KeyError, TypeError, ValueError):
            continue
    return resumes


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a file, one a line; a line cut short by a crash is skipped."""
    if not path.is_file():
        return
    with path.open(encoding="utf-8", errors="replace") as file:
        for line in file:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict):
                yield data


def training_starts(
    records: Sequence[StepRecord], resumes: Sequence[Resume]
) -> list[TrainingStart]:
    """The records split into starts: a new one wherever `elapsed_s` falls or the step does
    not go up. Each takes the newest resume between the previous start's last record and
    its own beginning; without one it started from step 0."""
    groups: list[list[StepRecord]] = []
    for record in records:
        previous = groups[-1][-1] if groups else None
        if (
            previous is None
            or record.elapsed_s < previous.elapsed_s
            or record.step <= previous.step
        ):
            groups.append([record])
        else:
            groups[-1].append(record)
    starts = []
    after = float("-inf")
    for group in groups:
        began = group[0].time - group[0].elapsed_s
        own = [r for r in resumes if after < r.time <= began + _RESUME_SLACK_S]
        resume = own[-1] if own else None
        starts.append(
            TrainingStart(
                begin=min(resume.time, began) if resume else began,
                from_step=resume.step if resume else 0,
                records=tuple(group),
            )
        )
        after = group[-1].time
    return starts


def steps_per_epoch(records: Sequence[StepRecord]) -> float | None:
    """Steps in one epoch, from where the records' epoch goes up by one (the median of those
    differences); None when the records name no epoch or cover fewer than two."""
    first_step: dict[int, int] = {}
    for record in records:
        if record.epoch is not None:
            first_step[record.epoch] = min(first_step.get(record.epoch, record.step), record.step)
    lengths = [
        first_step[epoch + 1] - first_step[epoch]
        for epoch in first_step
        if epoch + 1 in first_step and first_step[epoch + 1] > first_step[epoch]
    ]
    return statistics.median(lengths) if lengths else None
