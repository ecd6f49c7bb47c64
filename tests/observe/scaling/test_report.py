"""The study as a user reads it: the table (measured, then predicted sizes), where a step's
time goes, the fitted model with its error; and report/scaling.md with its plots."""

from __future__ import annotations

from pathlib import Path

from scaletrain.observe.scaling.fit import Fit
from scaletrain.observe.scaling.report import (
    breakdown_lines,
    fit_lines,
    table_lines,
    write_report,
)
from scaletrain.observe.scaling.study import Point, Study, StudyDesign

# Times in binary fractions of a second, so the table's arithmetic is exact:
# step(N) = 0.5/N + 0.25·(N-1)/N + 0.125 s, for 256 samples per step.
MODEL = Fit(weak=False, compute=(0.5, 0.0), communication=(0.25, 0.0), other=0.125)


def study_of(model: Fit, design: StudyDesign, unit: str, per_unit: int) -> Study:
    points = tuple(
        Point(size=n, processes=n * per_unit, step_s=model.step_s(n),
              samples_per_step=design.batch_for(n), compute_s=model.compute_s(n),
              communication_s=model.communication_s(n))
        for n in design.sizes
    )  # fmt: skip
    return Study(design=design, unit=unit, processes_per_unit=per_unit, points=points,
                 fit=model, predicted_sizes=(8,))  # fmt: skip


STRONG = study_of(MODEL, StudyDesign(sizes=(1, 2, 4), batch=256), "process", 1)


def test_the_table() -> None:
    assert table_lines(STRONG) == [
        "| N (processes) | processes | step (ms) | samples/s | speed-up | efficiency |",
        "|---:|---:|---:|---:|---:|---:|",
        "| 1 | 1 | 625.0 | 409.6 | 1.00 | 100% |",
        "| 2 | 2 | 500.0 | 512.0 | 1.25 | 62% |",  # 1.25 / 2 = 62.5%, shown rounded to even
        "| 4 | 4 | 437.5 | 585.1 | 1.43 | 36% |",
        "| 8 (predicted) | 8 | 406.2 | 630.2 | 1.54 | 19% |",
    ]


def test_where_the_step_goes_and_the_model() -> None:
    assert breakdown_lines(STRONG)[2:] == [
        "| 1 | 500.0 | 0.0 | 125.0 |",
        "| 2 | 250.0 | 125.0 | 125.0 |",
        "| 4 | 125.0 | 187.5 | 125.0 |",
    ]
    assert fit_lines(STRONG) == [
        "step(N) = compute(N) + communication(N) + other, in ms, N = processes:",
        "",
        "- compute(N) = 500.00/N + 0.00",
        "- communication(N) = 250.00·(N-1)/N + 0.00·log2(N) (exposed, not overlapped with compute)",
        "- other = 125.00 (data loading, launches, idle; mean of the sizes)",
        "",
        "Error of the fit at the measured sizes: N=1: 0.0%, N=2: 0.0%, N=4: 0.0% (largest 0.0%).",
    ]


def test_weak_scaling_over_nodes_without_a_batch() -> None:
    model = Fit(weak=True, compute=(0.125, 0.0), communication=(0.0625, 0.0), other=0.0)
    study = study_of(model, StudyDesign(sizes=(1, 2), weak=True), "node", 4)
    # Each node does the same work: 2 nodes do twice the steps' work in 0.15625 s.
    assert table_lines(study)[0].startswith("| N (nodes) | processes | step (ms) | steps/s |")
    assert table_lines(study)[3] == "| 2 | 8 | 156.2 | 12.8 | 1.60 | 80% |"
    assert fit_lines(study)[2] == (
        "- compute(N) = 125.00 + 0.00·log2(N) (weak: the work per process stays the same)"
    )


def test_the_markdown_report_and_its_plots(tmp_path: Path) -> None:
    path = write_report(STRONG, "mnist", tmp_path / "report")
    text = path.read_text()
    assert path.name == "scaling.md" and text.startswith("# mnist: strong scaling\n")
    assert "20 timed steps per size after 5 warm-up steps" in text
    assert "| 8 (predicted) | 8 | 406.2 | 630.2 | 1.54 | 19% |" in text
    for plot in ("scaling-throughput", "scaling-efficiency", "scaling-breakdown"):
        assert f"![{plot}]({plot}.png)" in text
        assert (tmp_path / "report" / f"{plot}.png").stat().st_size > 0
