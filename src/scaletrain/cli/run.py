"""`scaletrain run`: run a training script as N local processes, recorded in a run folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.cli.common import MONITOR_INTERVAL_OPTION, PROFILE_OPTION, RUNS_DIR_OPTION
from scaletrain.cli.local_launch import show_other_ranks, start_local
from scaletrain.core import console
from scaletrain.core.progress_line import format_value
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import PROFILE
from scaletrain.launch.local_run import LocalRunResult
from scaletrain.observe.profile_spec import parse_profile

# A crashed or killed rank restarts the group this many times before the run fails.
DEFAULT_MAX_RESTARTS = 3


def run(
    ctx: typer.Context,
    script: Path = typer.Argument(..., help="Your training script; arguments after it go to it."),
    nproc: str = typer.Option(
        "1",
        "--nproc",
        "-n",
        envvar="SCALETRAIN_NPROC",
        help="Processes to start: a number, or 'gpu' for one per visible GPU.",
    ),
    name: str | None = typer.Option(
        None,
        "--name",
        envvar="SCALETRAIN_RUN_NAME",
        help="Run name (folder under --runs-dir). Default: <script>-<date>-<time>.",
    ),
    runs_dir: Path = RUNS_DIR_OPTION,
    max_restarts: int = typer.Option(
        DEFAULT_MAX_RESTARTS,
        "--max-restarts",
        envvar="SCALETRAIN_MAX_RESTARTS",
        help=(
            "Restart all processes up to this many times if one fails; with a Checkpointer "
            "they resume from the newest checkpoint. 0: fail at once."
        ),
    ),
    monitor_interval: float = MONITOR_INTERVAL_OPTION,
    profile: str | None = PROFILE_OPTION,
) -> None:
    """Run a training script as N processes on this machine.

    Starts SCRIPT with torch.distributed.run and records the run in runs/<name>/: per-rank
    logs, metrics and a summary. Everything after SCRIPT is passed to it unchanged.

    Example: [bold]scaletrain run --nproc 2 examples/mnist/train.py --epochs 3[/bold]
    """
    started = time.time()
    spec = parse_profile(profile) if profile else None
    folder, result = start_local(
        str(script),
        args=ctx.args,
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        max_restarts=max_restarts,
        monitor_interval_s=monitor_interval or None,
        instrumented=spec is not None,
        variables={PROFILE: spec.to_text()} if spec else None,
    )
    stopped = _stopped_since(folder, started)
    _show_end(folder, result, stopped)
    # A clean stop resumes with the same command: not a failure, even when torchrun itself
    # got the SIGTERM (it then exits non-zero after its processes saved and exited 0).
    raise typer.Exit(0 if stopped else result.exit_code)


def _stopped_since(folder: RunFolder, started: float) -> dict[str, Any] | None:
    """What stopped.json says, if this run (not an earlier one) wrote it."""
    marker = folder.stopped_marker
    if marker.is_file() and marker.stat().st_mtime >= started:
        stopped: dict[str, Any] = json.loads(marker.read_text())
        return stopped
    return None


def _show_end(folder: RunFolder, result: LocalRunResult, stopped: dict[str, Any] | None) -> None:
    table = Table(title=f"run {folder.name}", show_header=False, title_justify="left")
    table.add_row("status", _status(result, stopped))
    table.add_row("duration", f"{result.duration_s:.1f} s")
    summary_file = folder.metrics / "summary.json"
    if summary_file.is_file():
        for key, value in json.loads(summary_file.read_text()).items():
            table.add_row(
                key, format_value(value) if isinstance(value, float | list) else str(value)
            )
    latest = CheckpointStore(folder.checkpoints).latest()
    if latest is not None:
        table.add_row("checkpoint", f"{latest}/")
    table.add_row("folder", f"{folder.root}/")
    console.console.print(table)
    if result.exit_code != 0 and stopped is None:
        show_other_ranks(folder, tracebacks_only=True)


def _status(result: LocalRunResult, stopped: dict[str, Any] | None) -> str:
    if stopped is not None:
        return (
            f"[warning]stopped at step {stopped['step']} ({stopped['reason']}); "
            "run the same command to resume[/warning]"
        )
    if result.exit_code != 0:
        return f"[error]failed (exit code {result.exit_code})[/error]"
    return "[success]finished[/success]"
