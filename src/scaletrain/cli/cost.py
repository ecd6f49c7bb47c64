"""`scaletrain cost`: what a run cost against its plan, what of it was lost, energy, idle GPUs."""

from __future__ import annotations

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
from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.cost.report import RunCost, run_cost
from scaletrain.observe.cost.text import (
    ATTEMPT_COLUMNS,
    ATTEMPT_NUMBERS,
    attempt_rows,
    cost_rows,
    summary,
    units_text,
)
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
        console.note(console.table(cost_rows(found), title=f"run {found.run}: {summary(found)}"))
        rows = attempt_rows(found)
        console.note(console.table(rows, columns=ATTEMPT_COLUMNS, right_aligned=ATTEMPT_NUMBERS))
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


def _plot(found: RunCost, path: Path) -> Path:
    labels = [f"{index + 1}: {a.state.lower()}" for index, a in enumerate(found.attempts)]
    billed = [found.units(a.elapsed_s) or a.elapsed_s / 3600 for a in found.attempts]
    lost = [found.units(a.lost_s or 0.0) or (a.lost_s or 0.0) / 3600 for a in found.attempts]
    unit = found.unit or "allocation hours"
    planned = f" (plan: {units_text(found.planned_units)} for the time limit)" if found.unit else ""
    return plot_stacked_bars(
        {"kept": [b - x for b, x in zip(billed, lost, strict=True)], "lost": lost},
        labels,
        f"run {found.run}: {unit} per attempt{planned}",
        unit,
        path,
    )
