"""The analysis for people: a text report (also saved as report/analysis.txt), a JSON file
for scripts and PNG plots in the run's report/ folder."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from scaletrain.core.plotting import plots_available
from scaletrain.observe.analysis.analyze import Analysis
from scaletrain.observe.analysis.breakdown import Breakdown
from scaletrain.observe.plots import plot_lines, plot_stacked_bars


def _ms_per_step(value_us: float, breakdown: Breakdown) -> str:
    return f"{value_us / breakdown.steps / 1000:8.2f}"


def _share(value_us: float, breakdown: Breakdown) -> str:
    return f"{value_us / breakdown.span_us:4.0%}" if breakdown.span_us else "   -"


def format_report(analysis: Analysis) -> str:
    """Per-rank time per step, top kernels or operators, stragglers and imbalance."""
    breakdowns = analysis.breakdowns
    device = "GPU kernels" if breakdowns and breakdowns[0].device == "gpu" else "CPU (gloo)"
    lines = [
        f"Trace analysis of {len(breakdowns)} rank(s) in {analysis.folder}/ ({device}); "
        "ms per step and share of the analysed span:",
        "",
        f"{'rank':>4} {'steps':>5} {'span':>8} {'compute':>13} {'communication':>13} "
        f"{'overlapped':>13} {'exposed comm':>13} {'data loading':>13} {'idle':>13}",
    ]
    for b in breakdowns:
        cells = [
            f"{_ms_per_step(value, b)} {_share(value, b)}"
            for value in (
                b.compute_us,
                b.communication_us,
                b.overlap_us,
                b.exposed_communication_us,
                b.data_loading_us,
                b.idle_us,
            )
        ]
        lines.append(f"{b.rank:>4} {b.steps:>5} {_ms_per_step(b.span_us, b)} " + " ".join(cells))
    lines += [
        "",
        "overlapped: communication hidden behind compute; exposed comm: the rest, which "
        "more ranks make longer.",
        "",
        "Top " + ("kernels by total time" if device == "GPU kernels" else "operators by self time"),
    ]
    for rank, entries in sorted(analysis.top.items()):
        lines.append(f"  rank {rank}:")
        total = sum(entry.total_us for entry in entries) or 1.0
        for entry in entries:
            lines.append(
                f"    {entry.total_us / 1000:9.2f} ms {entry.total_us / total:4.0%} "
                f"{entry.count:>6}x  {entry.name[:90]}"
            )
    stragglers = analysis.stragglers
    lines += ["", "Stragglers and load imbalance"]
    for timing in stragglers.timings:
        steps = timing.step_times_us
        mean_step = sum(steps) / len(steps) / 1000 if steps else 0.0
        lines.append(
            f"  rank {timing.rank}: step {mean_step:.2f} ms, starts collectives "
            f"{timing.mean_lateness_us / 1000:.2f} ms after the first rank "
            f"({timing.collectives} collectives matched)"
        )
    lines.append(
        f"  compute imbalance: {stragglers.imbalance:.1%} (slowest rank "
        f"{stragglers.slowest_compute_rank})"
    )
    lines += [f"  ! {finding}" for finding in stragglers.findings] or [
        "  no stragglers, no load imbalance above 10%"
    ]
    return "\n".join(lines) + "\n"


def write_report(analysis: Analysis, report: Path) -> list[Path]:
    """report/analysis.txt, analysis.json and, with matplotlib, breakdown.png and
    step-times.png."""
    report.mkdir(parents=True, exist_ok=True)
    text = report / "analysis.txt"
    text.write_text(format_report(analysis), encoding="utf-8")
    data = report / "analysis.json"
    record = {
        "breakdowns": [
            {**asdict(b), "overlap_ratio": b.overlap_ratio, "non_compute_us": b.non_compute_us}
            for b in analysis.breakdowns
        ],
        "top": {str(rank): [asdict(e) for e in entries] for rank, entries in analysis.top.items()},
        "stragglers": asdict(analysis.stragglers),
    }
    data.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    written = [text, data]
    if not plots_available():
        return written
    breakdowns = analysis.breakdowns
    labels = [f"rank {b.rank}" for b in breakdowns]

    def per_step(values: list[float]) -> list[float]:
        return [value / b.steps / 1000 for value, b in zip(values, breakdowns, strict=True)]

    categories = {
        "compute only": per_step([b.compute_us - b.overlap_us for b in breakdowns]),
        "compute + communication": per_step([b.overlap_us for b in breakdowns]),
        "exposed communication": per_step([b.exposed_communication_us for b in breakdowns]),
        "other (memory, data, launches)": per_step(
            [b.span_us - b.idle_us - b.compute_us - b.exposed_communication_us for b in breakdowns]
        ),
        "idle": per_step([b.idle_us for b in breakdowns]),
    }
    written.append(
        plot_stacked_bars(
            categories,
            labels,
            "Where each rank's step time goes",
            "ms per step",
            report / "breakdown.png",
        )
    )
    series = {
        f"rank {timing.rank}": (
            list(range(1, len(timing.step_times_us) + 1)),
            [time / 1000 for time in timing.step_times_us],
        )
        for timing in analysis.stragglers.timings
    }
    written.append(
        plot_lines(series, "Profiled step times", "profiled step", "ms", report / "step-times.png")
    )
    return written
