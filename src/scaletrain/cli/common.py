"""Options and lookups that several commands share, defined once."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.hang_report import DEFAULT_HANG_LIMIT_S
from scaletrain.core.progress_line import format_value
from scaletrain.core.run_folder import RunFolder, find_run
from scaletrain.core.run_record import RunRecord, read_run_record
from scaletrain.slurm.history import JobEvent, current_job, read_job_events

RUNS_DIR_OPTION = typer.Option(
    Path("runs"), "--runs-dir", envvar="SCALETRAIN_RUNS_DIR", help="Where run folders live."
)

RUN_NAME_OPTION = typer.Option(
    None,
    "--name",
    envvar="SCALETRAIN_RUN_NAME",
    help="Run name (folder under --runs-dir); the same name continues that run. "
    "Default: <script>-<date>-<time>.",
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

# run, plan and submit: the hang watchdog's limit.
HANG_LIMIT_OPTION = typer.Option(
    f"{DEFAULT_HANG_LIMIT_S:.0f}",
    "--hang-limit",
    envvar="SCALETRAIN_HANG_LIMIT",
    help="Seconds without a finished step (on any rank) after which the hang watchdog dumps "
    "every rank's stack and ends the run; at least 20 median steps. 0: no watchdog.",
)

RUN_ARGUMENT = typer.Argument(
    None,
    metavar="RUN",
    help="Run name (a folder under --runs-dir). Default: the newest run.",
    show_default=False,
)

SCRIPT_ARGUMENT = typer.Argument(
    ...,
    metavar="SCRIPT [ARGS]...",
    help="Your training script, then its own arguments (after -- if they are named like "
    "scaletrain's options).",
    show_default=False,
)

JSON_OPTION = typer.Option(False, "--json", help="Print the result as JSON on stdout.")

# What separates scaletrain's options from the script's on purpose: `train.py -- --name x`.
END_OF_OPTIONS = "--"


def process_environ() -> dict[str, str]:
    """This command's environment, read once here and passed down (PATH finds Slurm's tools)."""
    return dict(os.environ)


def script_arguments(ctx: typer.Context, script: str) -> tuple[str, ...]:
    """The script's arguments: everything after it, except scaletrain's own options.

    `submit ... train.py --dry-run` would otherwise hand --dry-run to the script and submit
    for real, so an option of this command after the script is an error; after `--` it is
    the script's on purpose (the first `--` is dropped).
    """
    arguments = list(ctx.args)
    if END_OF_OPTIONS in arguments:
        split = arguments.index(END_OF_OPTIONS)
        before, after = arguments[:split], arguments[split + 1 :]
    else:
        before, after = arguments, []
    ours = {name for parameter in ctx.command.get_params(ctx) for name in parameter.opts}
    for argument in before:
        name = argument.split("=", 1)[0]
        if name.startswith("-") and name in ours:
            command = ctx.command_path
            raise ScaletrainError(
                f"{argument!r} comes after the script {script!r}, where it would be passed to "
                f"the script instead of to `{command}`.",
                f"put {name} before {script} (`{command} {name} ... {script}`), or write "
                f"`{script} -- {argument}` if your script takes {name} itself.",
            )
    return (*before, *after)


def summary_value(value: object) -> str:
    """A value of a run's summary as people read it: numbers to 4 significant digits, one
    number per rank (peak memory) comma-separated."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format_value(value)
    if isinstance(value, list) and all(isinstance(item, int | float) for item in value):
        return format_value(value)
    return str(value)


def show_report(path: Path) -> None:
    """A report the processes wrote (preflight.json, bench.json) as the JSON result."""
    console.show_text(read_text(path, "report").rstrip("\n") + "\n")


def newest_launch(
    runs_dir: Path, name: str | None
) -> tuple[RunFolder, tuple[JobEvent, ...], JobEvent | RunRecord]:
    """The run folder, its job events and its newest launch: its current Slurm job, or its
    `scaletrain run` (run.json) if that started later; an error that says so if neither."""
    folder = find_run(runs_dir, name)
    events = read_job_events(folder)
    job, record = current_job(events), read_run_record(folder)
    if record is not None and (job is None or record.started > job.time):
        return folder, events, record
    if job is None:
        jobs = "has no submission" if folder.jobs_log.exists() else "does not exist"
        raise ScaletrainError(
            f"Run {folder.name!r} was never started: its {folder.jobs_log.name} {jobs} "
            f"(scaletrain submit) and it has no {folder.run_record.name} (scaletrain run).",
            "start it with `scaletrain submit` or `scaletrain run`, or name a run that ran.",
        )
    return folder, events, job
