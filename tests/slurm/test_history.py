"""runs/<name>/jobs.jsonl: appended records, the current job, damaged files."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm.history import (
    current_job,
    job_output_file,
    read_job_events,
    record_job_event,
    requeue_count,
)


def test_events_are_appended_one_json_line_each(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "r")
    moment = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)
    record_job_event(folder, "submitted", "100", now=moment, partition="debug")
    record_job_event(folder, "requeued", "100", restart_count=1)
    lines = folder.jobs_log.read_text().splitlines()
    assert json.loads(lines[0]) == {
        "event": "submitted",
        "job_id": "100",
        "time": "2026-11-23T09:30:00+00:00",
        "partition": "debug",
    }
    assert json.loads(lines[1])["event"] == "requeued"
    assert json.loads(lines[1])["time"].endswith("+00:00")  # UTC, whatever the local zone


def test_the_newest_submission_is_the_current_job(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    for event, job_id in [
        ("submitted", "100"),
        ("requeued", "100"),
        ("requeued", "100"),
        ("cancelled", "100"),
        ("submitted", "200"),
        ("requeued", "200"),
    ]:
        record_job_event(folder, event, job_id)
    events = read_job_events(folder)
    job = current_job(events)
    assert job is not None and job.job_id == "200"
    assert requeue_count(events, "200") == 1 and requeue_count(events, "100") == 2


def test_a_run_never_submitted_has_no_events(tmp_path: Path) -> None:
    assert read_job_events(RunFolder(tmp_path)) == ()
    assert current_job(()) is None


def test_unknown_event_kinds_are_refused_when_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown job event 'started'"):
        record_job_event(RunFolder(tmp_path), "started", "1")


def test_a_damaged_line_is_named_and_a_cut_last_line_is_skipped(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    record_job_event(folder, "submitted", "100")
    with folder.jobs_log.open("a") as log:
        log.write('{"event": "requeued", "job_id": "1')  # the job died while appending
    assert [event.job_id for event in read_job_events(folder)] == ["100"]
    folder.jobs_log.write_text('{"event": "submitted", "job_id": "1", "time": "x"}\nnot json\n{}\n')
    with pytest.raises(ScaletrainError) as caught:
        read_job_events(folder)
    assert f"Line 2 of {folder.jobs_log} is not a job record" in caught.value.problem


def test_the_output_file_is_matched_by_the_whole_job_id(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path).create()
    assert job_output_file(folder, "12") is None
    (folder.logs / "train-123.out").write_text("other job")
    (folder.logs / "rank-0.out").write_text("a local run's rank log")
    assert job_output_file(folder, "12") is None
    (folder.logs / "train-12.out").write_text("this job")
    assert job_output_file(folder, "12") == folder.logs / "train-12.out"
