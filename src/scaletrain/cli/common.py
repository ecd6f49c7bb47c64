"""Options and lookups that several commands share, defined once."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from scaletrain.core.run_folder import RunFolder, find_run
from scaletrain.slurm.history import JobEvent, require_current_job

RUNS_DIR_OPTION = typer.Option(
    Path("runs"), "--runs-dir", envvar="SCALETRAIN_RUNS_DIR", help="Where run folders live."
)

# check and bench: two processes by default, so that the collectives really communicate.
DIAGNOSE_NPROC_OPTION = typer.Option(
    "2", "--nproc", "-n", envvar="SCALETRAIN_NPROC", help="Processes to start (or 'gpu')."
)

# run, submit and scale: the sampler beside training (`scaletrain monitor`).
MONITOR_INTERVAL_OPTION = typer.Option(
    2.0,
    "--monitor-interval",
    envvar="SCALETRAIN_MONITOR_INTERVAL",
    help="Seconds between GPU/CPU samples on each node (scaletrain monitor); 0: no sampler.",
)

# run and submit: torch.profiler on chosen ranks, traces in runs/<name>/traces/.
PROFILE_OPTION = typer.Option(
    None,
    "--profile",
    metavar="RANKS[:WAIT,WARMUP,ACTIVE]",
    envvar="SCALETRAIN_PROFILE",
    help="Profile these ranks ('all', '0,3') over wait/warmup/active optimizer steps "
    "(default 5,2,3) into runs/<name>/traces/; see scaletrain analyze.",
)

RUN_ARGUMENT = typer.Argument(
    None,
    metavar="RUN",
    help="Run name (a folder under --runs-dir). Default: the newest run.",
    show_default=False,
)


def process_environ() -> dict[str, str]:
    """This command's environment, read once here and passed down (PATH finds Slurm's tools)."""
    return dict(os.environ)


def submitted_run(runs_dir: Path, name: str | None) -> tuple[RunFolder, tuple[JobEvent, ...], str]:
    """The run folder, its job events and its current job id, or an error that says why not."""
    folder = find_run(runs_dir, name)
    events, job = require_current_job(folder)
    return folder, events, job.job_id
