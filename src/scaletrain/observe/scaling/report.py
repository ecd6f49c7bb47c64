"""A scaling study for people: the table (also in the terminal), the fit and its error, and
a markdown report with PNG plots in the study's report/ folder."""

from __future__ import annotations

from pathlib import Path

from scaletrain.core.plotting import plots_available
from scaletrain.observe.plots import plot_lines, plot_stacked_bars
from scaletrain.observe.scaling.study import Study


def throughput_unit(study: Study) -> str:
    return "samples/s" if study.design.batch is not None else "steps/s"


def _plural(unit: str) -> str:
    return unit + ("es" if unit.endswith("s") else "s")


def table_lines(study: Study) -> list[str]:
    unit, throughput = _plural(study.unit), throughput_unit(study)
    lines = [
        f"| N ({unit}) | processes | step (ms) | {throughput} | speed-up | efficiency |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in study.rows():
        mark = " (predicted)" if row.predicted else ""
        lines.append(
            f"| {row.size}{mark} | {row.processes} | {row.step_s * 1000:.1f} | "
            f"{row.throughput:,.1f} | {row.speedup:.2f} | {row.efficiency:.0%} |"
        )
    return lines


def fit_lines(study: Study) -> list[str]:
    fit, errors = study.fit, study.fit_errors()
    a, b = fit.compute
    c, d = fit.communication
    compute = (
        f"{a * 1000:.2f} + {b * 1000:.2f}·log2(N)"
        if fit.weak
        else f"{a * 1000:.2f}/N + {b * 1000:.2f}"
    )
    lines = [
        f"step(N) = compute(N) + communication(N) + other, in ms, N = {_plural(study.unit)}:",
        "",
        f"- compute(N) = {compute}"
        + (" (weak: the work per process stays the same)" if fit.weak else ""),
        f"- communication(N) = {c * 1000:.2f}·(N-1)/N + {d * 1000:.2f}·log2(N) (exposed, "
        "not overlapped with compute)",
        f"- other = {fit.other * 1000:.2f} (data loading, launches, idle; mean of the sizes)",
        "",
        "Error of the fit at the measured sizes: "
        + ", ".join(
            f"N={p.size}: {error:.1%}" for p, error in zip(study.points, errors, strict=True)
        )
        + f" (largest {max(errors):.1%}).",
    ]
    return lines


def breakdown_lines(study: Study) -> list[str]:
    lines = [
        f"| {_plural(study.unit)} | compute (ms) | exposed communication (ms) | other (ms) |",
        "|---:|---:|---:|---:|",
    ]
    for point in study.points:
        lines.append(
            f"| {point.size} | {point.compute_s * 1000:.1f} | "
            f"{point.communication_s * 1000:.1f} | {point.other_s * 1000:.1f} |"
        )
    return lines


def write_report(study: Study, title: str, report: Path) -> Path:
    """report/scaling.md with the table, the breakdown, the fit and the plots."""
    report.mkdir(parents=True, exist_ok=True)
    kind = "weak" if study.design.weak else "strong"
    plots = _plots(study, report) if plots_available() else []
    text = [
        f"# {title}: {kind} scaling",
        "",
        f"{study.design.timed} timed steps per size after {study.design.warmup} warm-up "
        f"steps; then {study.design.profiled} profiled steps split each step into compute "
        "and communication.",
        "",
        *table_lines(study),
        "",
        "## Where a step's time goes (from the profiles)",
        "",
        *breakdown_lines(study),
        "",
        "## Prediction",
        "",
        *fit_lines(study),
        "",
        *[f"![{path.stem}]({path.name})" for path in plots],
        "",
    ]
    path = report / "scaling.md"
    path.write_text("\n".join(text), encoding="utf-8")
    return path


def _plots(study: Study, report: Path) -> list[Path]:
    rows = study.rows()
    measured = [row for row in rows if not row.predicted]
    predicted = [rows[len(measured) - 1], *(row for row in rows if row.predicted)]
    base = measured[0]
    ideal = [base.throughput * row.size / base.size for row in rows]
    unit = throughput_unit(study)
    throughput = plot_lines(
        {
            "measured": ([r.size for r in measured], [r.throughput for r in measured]),
            "predicted": ([r.size for r in predicted], [r.throughput for r in predicted]),
            "ideal (linear)": ([r.size for r in rows], ideal),
        },
        "Throughput",
        _plural(study.unit),
        unit,
        report / "scaling-throughput.png",
        log_x=True,
        styles={"predicted": "s--", "ideal (linear)": ":"},
    )
    efficiency = plot_lines(
        {
            "measured": ([r.size for r in measured], [100 * r.efficiency for r in measured]),
            "predicted": ([r.size for r in predicted], [100 * r.efficiency for r in predicted]),
        },
        "Scaling efficiency",
        _plural(study.unit),
        "% of linear",
        report / "scaling-efficiency.png",
        log_x=True,
        styles={"predicted": "s--"},
    )
    sizes = [p.size for p in study.points] + list(study.predicted_sizes)
    fit = study.fit
    breakdown = plot_stacked_bars(
        {
            "compute": [1000 * p.compute_s for p in study.points]
            + [1000 * fit.compute_s(n) for n in study.predicted_sizes],
            "exposed communication": [1000 * p.communication_s for p in study.points]
            + [1000 * fit.communication_s(n) for n in study.predicted_sizes],
            "other": [1000 * p.other_s for p in study.points]
            + [1000 * fit.other for _ in study.predicted_sizes],
        },
        [str(n) + ("*" if n in study.predicted_sizes else "") for n in sizes],
        f"Step time by number of {_plural(study.unit)} (* predicted)",
        "ms per step",
        report / "scaling-breakdown.png",
    )
    return [throughput, efficiency, breakdown]
