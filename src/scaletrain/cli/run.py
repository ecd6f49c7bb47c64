"""`scaletrain run`: run a training script as N local processes, recorded in a run folder."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import typer
from rich.table import Table

from scaletrain.cli import console
from scaletrain.cli.common import RUNS_DIR_OPTION, process_environ
from scaletrain.launch.local import (
    LocalLaunch,
    LocalRunResult,
    check_launchable,
    launch_variables,
    run_local,
)
from scaletrain.run_folder import RunFolder, default_run_name
from scaletrain.runtime.cpus import allowed_cpus

# Lines of a failed rank's error log worth showing: the traceback's end.
_ERROR_TAIL_LINES = 15


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
        0, "--max-restarts", help="Restart all processes up to this many times if one fails."
    ),
) -> None:
    """Run a training script as N processes on this machine.

    Starts SCRIPT with torch.distributed.run and records the run in runs/<name>/: per-rank
    logs, metrics and a summary. Everything after SCRIPT is passed to it unchanged.

    Example: [bold]scaletrain run --nproc 2 examples/mnist/train.py --epochs 3[/bold]
    """
    folder = RunFolder(runs_dir / (name or default_run_name(script, datetime.now())))
    launch = LocalLaunch(
        script=script,
        script_args=tuple(ctx.args),
        nproc=nproc,
        run_folder=folder,
        max_restarts=max_restarts,
    )
    check_launchable(launch)
    variables = launch_variables(launch, process_environ(), allowed_cpus())
    _show_start(launch, variables)
    result = run_local(launch, variables)
    _show_end(folder, result)
    raise typer.Exit(result.exit_code)


def _show_start(launch: LocalLaunch, variables: dict[str, str]) -> None:
    processes = "one process per GPU" if launch.nproc == "gpu" else f"{launch.nproc} process(es)"
    console.heading(f"run {launch.run_folder.name}: {processes} on this machine (torchrun)")
    console.info(f"  folder   {launch.run_folder.root}/")
    console.info(f"  logs     {launch.run_folder.logs}/rank-<N>.out|.err (console shows rank 0)")
    for variable, value in variables.items():
        console.info(f"  set      {variable}={value}")


def _show_end(folder: RunFolder, result: LocalRunResult) -> None:
    table = Table(title=f"run {folder.name}", show_header=False, title_justify="left")
    status = (
        "[success]finished[/success]"
        if result.exit_code == 0
        else (f"[error]failed (exit code {result.exit_code})[/error]")
    )
    table.add_row("status", status)
    table.add_row("duration", f"{result.duration_s:.1f} s")
    summary_file = folder.metrics / "summary.json"
    if summary_file.is_file():
        for key, value in json.loads(summary_file.read_text()).items():
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    table.add_row("folder", f"{folder.root}/")
    console.console.print(table)
    if result.exit_code != 0:
        _show_failed_ranks(folder)


def _show_failed_ranks(folder: RunFolder) -> None:
    """Rank 0 is on the console already; show the end of any other rank's traceback."""
    for error_log in sorted(folder.logs.rglob("rank-*.err")):
        if error_log.name == "rank-0.err":
            continue
        lines = error_log.read_text(errors="replace").splitlines()
        if any("Traceback" in line for line in lines):
            console.error(f"{error_log} ends with:")
            console.console.print("\n".join(lines[-_ERROR_TAIL_LINES:]), markup=False)
