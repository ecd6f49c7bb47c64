"""The rehearsal's report: step time from its steps, the real job's predicted duration at its
size (perfect scaling, or a scaling study's), and the advice on --time and memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.rehearsal import (
    RehearsalReport,
    memory_line,
    predict,
    read_rehearsal_report,
    time_advice,
)


def rehearsal_json(**changes: Any) -> dict[str, Any]:
    """What a rehearsal of 3 + 3 steps on 2 GPUs writes: a slow first step, 1 s steps, 4 s
    across the save and resume; 30 s from the job's start to the end of the first step."""
    ends = [1030.0, 1031.0, 1032.0, 1036.0, 1037.0, 1038.0]
    return {
        "steps": 3,
        "job_started": 1000.0,
        "step_ends": ends,
        "world_size": 2,
        "total_steps": 101,
        "samples_per_step": 64,
        "save_s": 2.0,
        "load_s": 1.5,
        "weights_came_back": True,
        "peak_memory_gb": [20.0, 30.0],
        **changes,
    }


def report_of(tmp_path: Path, **changes: Any) -> RehearsalReport:
    folder = RunFolder(tmp_path / "rehearsal")
    folder.metrics.mkdir(parents=True)
    folder.rehearsal_report.write_text(json.dumps(rehearsal_json(**changes)))
    report = read_rehearsal_report(folder)
    assert report is not None
    return report


def test_the_step_time_leaves_out_the_first_step_and_the_resume(tmp_path: Path) -> None:
    report = report_of(tmp_path, step_ends=[1030.0, 1031.0, 1032.0, 1036.0, 1037.5, 1039.0])
    # Intervals 1, 1, [4 across the resume], 1.5, 1.5: the first and the resume left out.
    assert (report.step_s, report.timed_steps) == (1.5, 3)
    assert report.samples_per_s == pytest.approx(64 / 1.5)
    assert (report.start_s, report.peak_memory_gb) == (30.0, 30.0)


def test_predicted_at_the_rehearsal_size_is_start_up_steps_and_a_save(tmp_path: Path) -> None:
    prediction = predict(report_of(tmp_path), world_size=2)
    assert prediction is not None
    # 30 s start-up + 100 more steps × 1 s + a final save of 2 s.
    assert prediction.seconds == 132.0
    assert prediction.arithmetic == "start-up 0:00:30 + 100 steps × 1 s + a save 2 s"
    assert prediction.scaling == "the rehearsal's own size"


def test_a_larger_real_job_assumes_perfect_scaling_and_says_so(tmp_path: Path) -> None:
    prediction = predict(report_of(tmp_path), world_size=16)
    assert prediction is not None
    assert prediction.seconds == 30 + 100 * 1.0 * 2 / 16 + 2
    assert prediction.arithmetic == "start-up 0:00:30 + 100 steps × 1 s × 0.125 + a save 2 s"
    assert prediction.scaling == "assuming perfect scaling from 2 to 16 GPUs"


def test_a_scaling_study_of_the_run_gives_the_efficiency_between_the_sizes(
    tmp_path: Path,
) -> None:
    # Strong scaling, 1 process per unit: step(N) = 8/N + 0.5·(N-1)/N: 4.25 s at 2, 0.97 at 16,
    # 4.4 times faster on 8 times the GPUs: 55% of perfect.
    study = tmp_path / "scaling.json"
    fit = {"weak": False, "compute": [8.0, 0.0], "communication": [0.5, 0.0], "other": 0.0}
    study.write_text(json.dumps({"rows": [{"size": 1, "processes": 1}], "fit": fit}))
    prediction = predict(report_of(tmp_path), world_size=16, scaling_study=study)
    assert prediction is not None
    step_2, step_16 = 8 / 2 + 0.5 / 2, 8 / 16 + 0.5 * 15 / 16
    # Steps at 16 take step_16/step_2 of those at 2: below the perfect 2/16.
    assert prediction.seconds == pytest.approx(30 + 100 * step_16 / step_2 + 2)
    assert (
        prediction.scaling == f"scaling from 2 to 16 GPUs at 55% of perfect, from the study {study}"
    )
    # An unreadable study falls back to perfect scaling.
    study.write_text("{}")
    fallback = predict(report_of(tmp_path / "again"), world_size=16, scaling_study=study)
    assert fallback is not None and fallback.scaling.startswith("assuming perfect scaling")


def test_no_prediction_without_the_runs_length_or_steps(tmp_path: Path) -> None:
    assert predict(report_of(tmp_path / "a", total_steps=None), world_size=2) is None
    assert predict(report_of(tmp_path / "b", step_ends=[1030.0]), world_size=2) is None


def test_time_advice_says_too_short_fits_or_far_too_long() -> None:
    assert time_advice(9900, 2 * 3600) == (
        "--time 2:00:00 is too short: ask for 3:10:00 (predicted 2:45:00 + 15%)"
    )
    assert time_advice(9900, 4 * 3600) == "--time 4:00:00 fits (predicted 2:45:00)"
    assert time_advice(600, 12 * 3600) == (
        "--time 12:00:00 is far too long: ask for 0:12:00 (predicted 0:10:00 + 15%); "
        "shorter jobs start sooner"
    )


def test_memory_against_the_device(tmp_path: Path) -> None:
    report = report_of(tmp_path)
    assert memory_line(report, 64) == "peak 30 GB per process of 64 GB per GPU (47%)"
    assert memory_line(report, 32).endswith(
        "(94%): little room left; a longer batch or sequence may run out"
    )
    assert memory_line(report, None) == (
        "peak 30 GB per process (CPU processes: resident memory, no device to compare with)"
    )
