"""The scaling study's arithmetic: design, fit and table, on points with a known answer."""

from __future__ import annotations

import math

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.observe.scaling.fit import Fit, fit
from scaletrain.observe.scaling.study import Point, Study, StudyDesign, predicted_sizes


def points_from(model: Fit, sizes: tuple[int, ...], batch: int | None) -> list[Point]:
    """What a study measures when the machine follows `model` exactly."""
    return [
        Point(
            size=n,
            processes=n,
            step_s=model.step_s(n),
            samples_per_step=batch,
            compute_s=model.compute_s(n),
            communication_s=model.communication_s(n),
        )
        for n in sizes
    ]


def test_strong_scaling_fit_recovers_the_model_and_predicts_larger_sizes() -> None:
    truth = Fit(weak=False, compute=(0.8, 0.02), communication=(0.05, 0.01), other=0.005)
    design = StudyDesign(sizes=(1, 2, 4), batch=256)
    points = points_from(truth, design.sizes, 256)
    fitted = fit(points, weak=False)
    assert fitted.compute == pytest.approx(truth.compute)
    assert fitted.communication == pytest.approx(truth.communication)
    study = Study(design=design, unit="process", processes_per_unit=1, points=tuple(points),
                  fit=fitted, predicted_sizes=predicted_sizes(design.sizes))  # fmt: skip
    assert max(study.fit_errors()) < 1e-9
    rows = {row.size: row for row in study.rows()}
    assert [n for n, row in rows.items() if row.predicted] == [8, 16, 32]
    # 16 processes: 0.8/16 + 0.02 + 0.05·15/16 + 0.01·4 + 0.005 s per step of 256 samples
    step16 = 0.8 / 16 + 0.02 + 0.05 * 15 / 16 + 0.04 + 0.005
    assert rows[16].step_s == pytest.approx(step16)
    assert rows[16].speedup == pytest.approx(truth.step_s(1) / step16)
    assert rows[16].efficiency == pytest.approx(rows[16].speedup / 16)


def test_weak_scaling_grows_the_batch_and_keeps_compute() -> None:
    design = StudyDesign(sizes=(1, 2, 4), weak=True, batch=32)
    assert design.script_args(["--batch-size", "{batch}"], 4) == ("--batch-size", "128")
    truth = Fit(weak=True, compute=(0.1, 0.0), communication=(0.02, 0.0), other=0.0)
    points = points_from(truth, design.sizes, None)
    for point, n in zip(points, design.sizes, strict=True):
        object.__setattr__(point, "samples_per_step", design.batch_for(n))
    study = Study(design=design, unit="node", processes_per_unit=4, points=tuple(points),
                  fit=fit(points, weak=True), predicted_sizes=(8,))  # fmt: skip
    row = study.rows()[-1]
    # 8 nodes do 8x the work in 0.1 + 0.02·7/8 s instead of 0.1 s
    assert row.processes == 32
    assert row.speedup == pytest.approx(8 * 0.1 / (0.1 + 0.02 * 7 / 8))


def test_the_fit_never_makes_a_time_negative() -> None:
    noisy = [Point(size=n, processes=n, step_s=s, samples_per_step=None, compute_s=c,
                   communication_s=0.0) for n, s, c in ((1, 0.7, 0.6), (2, 0.06, 0.05),
                                                        (4, 0.06, 0.05))]  # fmt: skip
    fitted = fit(noisy, weak=False)
    assert min(fitted.compute) >= 0 and min(fitted.communication) >= 0
    assert all(fitted.step_s(n) > 0 for n in (8, 64, 1024)) and not math.isnan(fitted.other)


def test_bad_designs_are_one_line_with_a_fix() -> None:
    with pytest.raises(ScaletrainError, match=r"name \{batch\} but the study has no --batch"):
        StudyDesign(sizes=(1, 2)).script_args(["--batch-size", "{batch}"], 2)
    with pytest.raises(ScaletrainError, match="not a list of positive sizes"):
        StudyDesign(sizes=(0, 2))
