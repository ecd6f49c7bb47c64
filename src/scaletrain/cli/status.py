"""`scaletrain status`: the state of a run's current Slurm job and its latest progress."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import typer
from rich.table import Table

from scaletrain.cli.common import RUN_ARGUMENT, RUNS_DIR_OPTION, process_environ, submitted_run
from scaletrain.core import console
from scaletrain.core.progress_line import last_progress_line
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import job_output_file, requeue_count
from scaletrain.slurm.output import JobInfo


def status(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON on stdout."),
) -> None:
    """Show the state of a run's Slurm job: state, reason, time, nodes, restarts, progress.

    Example: [bold]scaletrain status[/bold] (the newest run) or [bold]scaletrain status
    mnist-20261123-070302[/bold]
    """
    folder, events, job_id = submitted_run(runs_dir, run_name)
    info = slurm.job_info(job_id, environ=process_environ())
    output_file = job_output_file(folder, job_id)
    fields: dict[str, object] = {
        "run": folder.name,
        "job_id": job_id,
        "state": info.state if info else "UNKNOWN",
        "reason": info.reason if info else "",
        "elapsed": info.elapsed if info else "",
        "time_limit": info.time_limit if info else "",
        "num_nodes": info.num_nodes if info else None,
        "nodelist": info.nodelist if info else "",
        "restarts": (
            info.restarts if info and info.restarts is not None else requeue_count(events, job_id)
        ),
        "progress": last_progress_line(folder.metrics / "train.jsonl"),
        "output": str(output_file) if output_file else None,
    }
    if as_json:
        print(json.dumps(fields))
        return
    _show(fields, info)


def _show(fields: Mapping[str, object], info: JobInfo | None) -> None:
    table = Table(title=f"run {fields['run']}", show_header=False, title_justify="left")
    table.add_row("job", str(fields["job_id"]))
    if info is None:
        table.add_row(
            "state",
            "[warning]unknown[/warning]: Slurm no longer knows this job (it ended a while "
            "ago and this site keeps no accounting)",
        )
    else:
        style = "info" if info.is_active else "success" if info.state == "COMPLETED" else "error"
        table.add_row("state", f"[{style}]{info.state_with_reason}[/{style}]")
        table.add_row("time", f"{info.elapsed or '-'} of {info.time_limit or '-'}")
        nodes = f"{info.num_nodes} ({info.nodelist})" if info.nodelist else str(info.num_nodes)
        table.add_row("nodes", nodes)
    table.add_row("restarts", str(fields["restarts"]))
    table.add_row("progress", str(fields["progress"] or "-"))
    table.add_row("output", str(fields["output"] or "- (the job has not started yet)"))
    console.console.print(table)
