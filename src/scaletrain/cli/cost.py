"""`scaletrain cost`: what a run cost against its plan, what of it was lost, energy, idle GPUs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import typer

from scaletrain.cli.common import (
    JSON_OPTION,
    RUN_ARGUMENT,
    RUNS_DIR_OPTION,
    newest_launch,
    process_environ,
)
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.plotting import plots_available
from scaletrain.core.progress_line import format_duration
from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.cost.energy import JOULES_PER_KWH
from scaletrain.observe.cost.report import NOT_REPORTED, RunCost, run_cost
from scaletrain.observe.plots import plot_stacked_bars
from scaletrain.planning.plan import read_plan
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import JobEvent

PLOT_OPTION = typer.Option(
    None,
    "--plot",
    metavar="FILE",
    help="Also draw the units of each attempt, kept and lost, as a PNG (needs matplotlib).",
)


def cost(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
    plot: Path | None = PLOT_OPTION,
) -> None:
    """Show what a Slurm run cost against its plan: units used and lost, energy, idle GPUs.

    Billing units from Slurm's accounting (sacct: every run of each job) at the plan's rate,
    the units lost to crashes, hangs and requeues, energy where the site or the monitor
    measures it, idle GPU time, and the cost per 1,000 steps and per epoch.

    Example: [bold]scaletrain cost mnist[/bold]
    """
    if plot is not None and not plots_available():
        raise ScaletrainError(
            "--plot needs matplotlib, which is not installed.",
            "pip install 'scaletrain[plots]', or leave out --plot.",
        )
    folder, events, _ = newest_launch(runs_dir, run_name)
    found = measure(folder, events)
    if found is None:
        raise ScaletrainError(
            "This site keeps no job accounting (sacct: accounting storage is disabled), so "
            "nothing says how long the run's jobs ran.",
            "`scaletrain status` shows the current job's time while Slurm still knows it; "
            "ask your site about sacct.",
        )
    if as_json:
        console.show_json(found.to_dict())
    else:
        console.note(console.table(_rows(found), title=f"run {found.run}: {summary(found)}"))
        console.note(
            console.table(
                _attempt_rows(found),
                columns=("job", "state", "started", "billed", "units", "steps", "lost"),
                right_aligned=("billed", "units", "lost"),
            )
        )
    if plot is not None:
        console.info(f"plot: {_plot(found, plot)}")


def measure(folder: RunFolder, events: tuple[JobEvent, ...]) -> RunCost | None:
    """The run's cost from accounting; None where the site keeps none."""
    if not folder.plan.is_file():
        raise ScaletrainError(
            f"Run {folder.name!r} has no plan.toml: only runs submitted with `scaletrain "
            "submit` are billed by Slurm.",
            "name a run that `scaletrain submit` started.",
        )
    job_ids = list(dict.fromkeys(e.job_id for e in events if e.event == "submitted"))
    if not job_ids:
        raise ScaletrainError(
            f"Run {folder.name!r} never went to Slurm (its jobs.jsonl names no job).",
            "name a run that `scaletrain submit` started.",
        )
    runs = slurm.job_runs(job_ids, environ=process_environ())
    if runs is None:
        return None
    if not runs:
        raise ScaletrainError(
            f"Slurm's accounting knows no run of job {', '.join(job_ids)}.",
            "sites keep accounting records for a limited time; a job that never started has none.",
        )
    return run_cost(folder, read_plan(folder.plan), runs)


def summary(found: RunCost) -> str:
    """One line: units used of planned, and lost (seconds where nothing is billed)."""
    so_far = "" if found.finished else " so far"
    lost = found.lost_s
    lost_text = "lost unknown" if lost is None else f"{_amount(found, lost)} lost"
    if found.unit is None:
        return f"{format_duration(found.used_s)} of allocation{so_far}, {lost_text}"
    used = _units(found.units(found.used_s))
    planned = found.planned_units
    of_plan = f" of {_units(planned)} planned" if planned else ""
    return f"{used} {found.unit} used{so_far}{of_plan}, {lost_text}"


def _rows(found: RunCost) -> list[tuple[str, console.Piece]]:
    count = len(found.attempts)
    rows: list[tuple[str, console.Piece]] = []
    if found.unit is None:
        rows.append(("billing", "the cluster profile bills nothing: times only"))
    else:
        rows += [
            ("rate", f"{_units(found.units_per_hour)} {found.unit} per hour (plan.toml)"),
            (
                "planned",
                f"{_units(found.planned_units)} {found.unit} for "
                f"{format_duration(found.time_limit_s)} (the time limit, once)",
            ),
        ]
    rows.append(
        ("used", f"{_amount(found, found.used_s)} over {count} attempt{'s' * (count != 1)}")
    )
    lost = found.lost_s
    rows.append(
        (
            "lost",
            "unknown: the script reports no steps (st.Progress)"
            if lost is None
            else f"{_amount(found, lost)}: work not kept after crashes, hangs and requeues",
        )
    )
    if found.steps is not None:
        epoch = f", {found.steps_per_epoch:g} per epoch" if found.steps_per_epoch else ""
        rows.append(("steps", f"{found.steps:,}{epoch}"))
    per_1000 = found.per_steps(1000)
    if per_1000 is not None:
        rows.append(("per 1,000 steps", _amount(found, per_1000)))
    per_epoch = found.per_steps(found.steps_per_epoch)
    if per_epoch is not None:
        rows.append(("per epoch", _amount(found, per_epoch)))
    rows += _energy_rows(found)
    return rows


def _energy_rows(found: RunCost) -> list[tuple[str, console.Piece]]:
    site = found.site_energy_joules
    rows: list[tuple[str, console.Piece]] = [
        ("energy", f"{site / JOULES_PER_KWH:.3g} kWh (sacct)" if site else NOT_REPORTED)
    ]
    gpus = found.gpus
    if gpus is None:
        rows.append(("GPU power", "no GPU samples (scaletrain monitor)"))
        return rows
    if gpus.energy_joules is None:
        rows.append(("GPU power", "no power readings in the monitor's samples"))
    else:
        per_step = f", {gpus.energy_joules / found.steps:,.0f} J per step" if found.steps else ""
        rows.append(("GPU energy", f"{gpus.energy_joules / JOULES_PER_KWH:.3g} kWh{per_step}"))
    share = gpus.idle_gpu_s / gpus.sampled_gpu_s if gpus.sampled_gpu_s else 0.0
    rows.append(
        (
            "idle GPUs",
            f"{gpus.idle_gpu_s / 3600:.3g} of {gpus.sampled_gpu_s / 3600:.3g} GPU-hours "
            f"({share:.0%}) below the monitor's idle threshold",
        )
    )
    return rows


def _attempt_rows(found: RunCost) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for attempt in found.attempts:
        steps = f"{attempt.from_step}→{attempt.to_step}" if attempt.to_step is not None else "none"
        if attempt.starts > 1:
            steps += f" ({attempt.starts} starts)"
        lost = attempt.lost_s
        rows.append(
            (
                attempt.job_id,
                attempt.state,
                _clock(attempt.start),
                format_duration(attempt.elapsed_s),
                _units(found.units(attempt.elapsed_s)),
                steps,
                "-" if lost is None else _units(found.units(lost)) if found.unit else _time(lost),
            )
        )
    return rows


def _plot(found: RunCost, path: Path) -> Path:
    labels = [f"{index + 1}: {a.state.lower()}" for index, a in enumerate(found.attempts)]
    billed = [found.units(a.elapsed_s) or a.elapsed_s / 3600 for a in found.attempts]
    lost = [found.units(a.lost_s or 0.0) or (a.lost_s or 0.0) / 3600 for a in found.attempts]
    unit = found.unit or "allocation hours"
    planned = f" (plan: {_units(found.planned_units)} for the time limit)" if found.unit else ""
    return plot_stacked_bars(
        {"kept": [b - x for b, x in zip(billed, lost, strict=True)], "lost": lost},
        labels,
        f"run {found.run}: {unit} per attempt{planned}",
        unit,
        path,
    )


def _amount(found: RunCost, seconds: float) -> str:
    """Units and allocation time: `1.23 GPU-hours (0:36:54)`; the time alone without billing."""
    units = found.units(seconds)
    return _time(seconds) if units is None else f"{_units(units)} {found.unit} ({_time(seconds)})"


def _time(seconds: float) -> str:
    return format_duration(seconds) if seconds >= 1 or seconds == 0 else f"{seconds:.1f} s"


def _units(value: float | None) -> str:
    """Three significant digits, whole numbers from 100 on."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _clock(moment: float | None) -> str:
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
