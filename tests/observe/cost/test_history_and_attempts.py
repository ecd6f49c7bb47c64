"""The arithmetic of `scaletrain cost`: starts of the training processes from train.jsonl and
resumes.jsonl, and the lost time of each of Slurm's runs, on histories whose numbers can be
checked by hand."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scaletrain.observe.cost.attempts import attempts
from scaletrain.observe.cost.history import (
    Resume,
    StepRecord,
    TrainingStart,
    read_resumes,
    read_step_records,
    steps_per_epoch,
    training_starts,
)
from scaletrain.slurm.output import AccountedRun


def records(first: int, last: int, *, began: float, pace: float = 1.0) -> list[StepRecord]:
    """Steps first..last of one Progress that began at `began`, one every `pace` seconds."""
    return [
        StepRecord(step=step, time=began + (step - first + 1) * pace,
                   elapsed_s=(step - first + 1) * pace, epoch=(step - 1) // 16)
        for step in range(first, last + 1)
    ]  # fmt: skip


def run(state: str, start: float, end: float | None, elapsed: int | None = None) -> AccountedRun:
    return AccountedRun(
        job_id="7", state=state, start=start, end=end,
        elapsed_s=elapsed if elapsed is not None else int((end or start) - start),
        nodes=1, energy_joules=None,
    )  # fmt: skip


# Attempt 1 (1000-1100, requeued): the processes train steps 1-12 from 1010, crash; torchrun
# restarts them, they resume from the checkpoint of step 10 at 1040, train 11-20 from 1041,
# save at 20 and stop. Attempt 2 (1200-1300) resumes from 20 at 1210 and completes step 48.
CRASH_AND_REQUEUE = [
    *records(1, 12, began=1010),
    *records(11, 20, began=1041),
    *records(21, 48, began=1211),
]
RESUMES = [Resume(step=10, time=1040), Resume(step=20, time=1210)]
RUNS = [run("REQUEUED", 1000, 1100), run("COMPLETED", 1200, 1300)]


def test_starts_are_found_where_progress_begins_again() -> None:
    starts = training_starts(CRASH_AND_REQUEUE, RESUMES)
    assert [(s.begin, s.from_step, s.last_step) for s in starts] == [
        (1010, 0, 12), (1040, 10, 20), (1210, 20, 48),
    ]  # fmt: skip
    # Without a resume, a start counts from step 0 and begins when its Progress began.
    assert [s.from_step for s in training_starts(CRASH_AND_REQUEUE, [])] == [0, 0, 0]


def test_a_crash_loses_the_steps_since_the_checkpoint_and_a_requeue_its_tail() -> None:
    found = attempts(RUNS, training_starts(CRASH_AND_REQUEUE, RESUMES), resumed_from=None)
    # Step 10 was reached at 1020 and the restart resumed at 1040: 20 s. Step 20 was reached
    # at 1051 and the attempt ended at 1100 (save, exit, requeue): 49 s. The run completed.
    assert [a.lost_s for a in found] == [20 + 49, 0]
    assert [(a.from_step, a.to_step, a.starts) for a in found] == [(0, 20, 2), (20, 48, 1)]
    assert [a.elapsed_s for a in found] == [100, 100]


def test_a_run_that_failed_loses_what_came_after_its_newest_checkpoint() -> None:
    runs = [RUNS[0], run("FAILED", 1200, 1300)]
    starts = training_starts(CRASH_AND_REQUEUE, RESUMES)
    # A new start would resume from step 45, reached at 1211 + 25 = 1236.
    assert [a.lost_s for a in attempts(runs, starts, resumed_from=45)] == [69, 1300 - 1236]
    # No checkpoint at all: the whole attempt, start-up included.
    assert [a.lost_s for a in attempts(runs, starts, resumed_from=0)] == [69, 100]


def test_an_attempt_that_trained_no_step_is_lost_whole_unless_it_still_starts() -> None:
    starts = training_starts(CRASH_AND_REQUEUE[:12], [])
    empty = run("REQUEUED", 1100, 1130)
    found = attempts([run("REQUEUED", 1000, 1050), empty], starts, resumed_from=10)
    assert [a.lost_s for a in found] == [50 - 20, 30]
    assert (found[1].from_step, found[1].to_step, found[1].starts) == (None, None, 0)
    still_starting = run("RUNNING", 1100, None, elapsed=30)
    found = attempts([run("REQUEUED", 1000, 1050), still_starting], starts, resumed_from=None)
    # Where the new start resumes is not known yet: nothing is counted lost so far.
    assert [a.lost_s for a in found] == [0, 0]


def test_a_start_that_never_passed_its_checkpoint_is_lost_whole() -> None:
    # Resumed from 10 at 1040, trained 11-12, crashed; the next start resumed from 10 again.
    history = [*records(1, 12, began=1010), *records(11, 12, began=1041),
               *records(11, 30, began=1061)]  # fmt: skip
    resumes = [Resume(step=10, time=1040), Resume(step=10, time=1060)]
    found = attempts([run("COMPLETED", 1000, 1100)], training_starts(history, resumes),
                     resumed_from=None)  # fmt: skip
    assert found[0].lost_s == (1040 - 1020) + (1060 - 1040)


def test_without_reported_steps_nothing_says_what_was_lost() -> None:
    found = attempts(RUNS, [], resumed_from=0)
    assert [a.lost_s for a in found] == [None, None]


def test_the_time_of_a_step_between_sparse_records() -> None:
    # Reports every 5 steps: 15 at 1010, 20 at 1020; resumed from 10 when Progress began (1000).
    start = TrainingStart(
        begin=999, from_step=10,
        records=(StepRecord(step=15, time=1010, elapsed_s=10),
                 StepRecord(step=20, time=1020, elapsed_s=20)),
    )  # fmt: skip
    assert start.time_at(10) == 1000 and start.time_at(12) == 1004
    assert start.time_at(18) == 1016
    assert start.time_at(22) == 1024  # past the last record: at the mean pace, 1 s a step
    assert start.time_at(3) == 1000


def test_steps_per_epoch_from_where_the_epoch_goes_up() -> None:
    assert steps_per_epoch(CRASH_AND_REQUEUE) == 16
    assert steps_per_epoch(records(1, 10, began=0)) is None  # one epoch only
    no_epochs = [StepRecord(step=1, time=1, elapsed_s=1)]
    assert steps_per_epoch(no_epochs) is None


def test_files_as_progress_and_the_checkpointer_write_them(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(
        json.dumps({"step": 1, "total_steps": 4, "epoch": 0, "loss": 1.5, "samples_per_s": 9.0,
                    "elapsed_s": 0.5, "eta_s": 1.5, "time": 1795860638.025}) + "\n"
        + json.dumps({"step": 2, "elapsed_s": 1.0}) + "\n"  # an older version: no time
        + '{"step": 3, "elapsed_s": 1.5, "ti'  # cut short by a crash
    )  # fmt: skip
    assert read_step_records(train) == [
        StepRecord(step=1, time=1795860638.025, elapsed_s=0.5, epoch=0)
    ]
    resumes = tmp_path / "resumes.jsonl"
    moment = datetime(2026, 11, 28, 10, 11, 7, tzinfo=timezone.utc)
    resumes.write_text(json.dumps({"time": moment.isoformat(), "step": 10, "epoch": 0}) + "\n")
    assert read_resumes(resumes) == [Resume(step=10, time=moment.timestamp())]
    assert read_step_records(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("slack", [0.0, 0.9])
def test_a_resume_written_within_a_second_of_progress_belongs_to_it(slack: float) -> None:
    # Its time is cut to the second, so it may read a fraction after Progress began.
    starts = training_starts(records(11, 12, began=1041), [Resume(step=10, time=1041 + slack)])
    assert starts[0].from_step == 10
