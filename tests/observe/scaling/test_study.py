"""A study's design, and one size's point measured from what its run left: the step clock's
files (the slowest rank's median timed step) and the profiled ranks' traces (the split)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import PROFILE, STOP_AFTER_STEPS
from scaletrain.observe.profile.step_clock_files import steps_file
from scaletrain.observe.scaling.fit import Fit
from scaletrain.observe.scaling.study import (
    Point,
    Study,
    StudyDesign,
    measure,
    predicted_sizes,
    save_study,
)
from tests.support.kineto_traces import gloo_trace


def test_what_each_size_runs() -> None:
    design = StudyDesign(sizes=(1, 2, 4), warmup=5, timed=20, profiled=3)
    # 5 warm-up + 20 timed steps, one step for the profiler's own warm-up, 3 profiled.
    assert design.total_steps == 29
    assert design.variables() == {STOP_AFTER_STEPS: "29", PROFILE: "all:25,1,3"}
    assert predicted_sizes(design.sizes) == (8, 16, 32)


def test_the_batch_strong_and_weak() -> None:
    strong, weak = (
        StudyDesign(sizes=(1, 4), batch=256),
        StudyDesign(sizes=(1, 4), weak=True, batch=32),
    )
    assert [strong.batch_for(n) for n in (1, 4)] == [256, 256]  # split over more processes
    assert [weak.batch_for(n) for n in (1, 4)] == [32, 128]  # the same per process
    args = ["--batch-size", "{batch}", "--lr", "0.1"]
    assert strong.script_args(args, 4) == ("--batch-size", "256", "--lr", "0.1")
    assert StudyDesign(sizes=(1,)).script_args(["--lr", "0.1"], 1) == ("--lr", "0.1")
    assert StudyDesign(sizes=(1,)).batch_for(8) is None


def test_a_design_that_cannot_run_says_why() -> None:
    with pytest.raises(ScaletrainError, match="not a list of positive sizes"):
        StudyDesign(sizes=())
    with pytest.raises(ScaletrainError, match="at least 2 timed steps") as raised:
        StudyDesign(sizes=(1, 2), timed=1)
    assert "--steps" in raised.value.hint
    with pytest.raises(ScaletrainError, match="at least 2 timed steps"):
        StudyDesign(sizes=(1, 2), profiled=0)


DESIGN = StudyDesign(sizes=(1, 2), batch=64, warmup=2, timed=3, profiled=1)
# Steps 3-5 are timed (ends 2..5): rank 0 takes 0.5, 0.5, 0.6 s; rank 1 0.6 s each.
STEP_ENDS = {
    0: [10.0, 11.0, 12.0, 12.5, 13.0, 13.6, 14.0],
    1: [10.0, 11.0, 12.0, 12.6, 13.2, 13.8, 14.1],
}


def run_of_size_two(folder: RunFolder, step_ends: dict[int, list[float]] = STEP_ENDS) -> None:
    for rank, ends in step_ends.items():
        record = {"rank": rank, "world_size": 2, "host": "n1", "started": 9.0, "step_ends": ends}
        path = steps_file(folder.metrics, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record), encoding="utf-8")
        gloo_trace(rank, 2).write(folder.traces / f"rank-{rank}.pt.trace.json")


def test_a_point_from_the_runs_files(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "n2")
    run_of_size_two(folder)
    point = measure(folder, 2, DESIGN)
    # The slowest rank's median step; its traces: 72.5% compute, 10% exposed communication.
    assert point == Point(
        size=2, processes=2, step_s=pytest.approx(0.6), samples_per_step=64,
        compute_s=pytest.approx(0.725 * 0.6), communication_s=pytest.approx(0.1 * 0.6),
    )  # fmt: skip
    assert point.other_s == pytest.approx(0.6 * (1 - 0.725 - 0.1))
    assert point.throughput == pytest.approx(64 / 0.6)


def test_a_run_that_timed_too_little_says_what_to_change(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "n2")
    with pytest.raises(ScaletrainError, match="recorded no step times") as raised:
        measure(folder, 2, DESIGN)
    assert "did the script reach 7 optimizer steps?" in raised.value.hint
    # Rank 0 ended during the warm-up: no step of it was timed.
    run_of_size_two(folder, {0: [10.0, 11.0, 12.0], 1: STEP_ENDS[1]})
    with pytest.raises(ScaletrainError, match="ended after 3 steps, before the 5") as raised:
        measure(folder, 2, DESIGN)
    assert "fewer --steps" in raised.value.hint


def test_the_saved_study(tmp_path: Path) -> None:
    model = Fit(weak=False, compute=(0.8, 0.0), communication=(0.1, 0.0), other=0.0)
    points = tuple(
        Point(size=n, processes=n, step_s=model.step_s(n), samples_per_step=64,
              compute_s=model.compute_s(n), communication_s=model.communication_s(n))
        for n in (1, 2)
    )  # fmt: skip
    study = Study(design=DESIGN, unit="process", processes_per_unit=1, points=points,
                  fit=model, predicted_sizes=(4,))  # fmt: skip
    path = tmp_path / "report" / "scaling.json"
    save_study(study, path)
    saved = json.loads(path.read_text())
    assert [(p["size"], p["step_s"], p["throughput"]) for p in saved["points"]] == [
        (1, 0.8, 80.0),
        (2, 0.45, pytest.approx(64 / 0.45)),
    ]
    assert [(row["size"], row["predicted"]) for row in saved["rows"]] == [
        (1, False),
        (2, False),
        (4, True),
    ]
    assert saved["fit"] == {"weak": False, "compute": [0.8, 0.0], "communication": [0.1, 0.0],
                            "other": 0.0}  # fmt: skip
    assert saved["fit_errors"] == [0.0, 0.0]
