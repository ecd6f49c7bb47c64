"""`scaletrain cancel`: cancel a run's current Slurm job and record that in jobs.jsonl."""

from __future__ import annotations

from pathlib import Path

from scaletrain.cli.common import (
    JSON_OPTION,
    RUN_ARGUMENT,
    RUNS_DIR_OPTION,
    process_environ,
    submitted_run,
)
from scaletrain.core import console
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import record_job_event


def cancel(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Cancel the current Slurm job of a run (scancel) and note it in the run's jobs.jsonl.

    Example: [bold]scaletrain cancel mnist-20261123-070302[/bold]
    """
    folder, _, job_id = submitted_run(runs_dir, run_name)
    environ = process_environ()
    info = slurm.job_info(job_id, environ=environ)
    # scancel accepts a job id Slurm has forgotten without a word: ask first.
    if info is None or not info.is_active:
        state = info.state if info else "no longer known to Slurm"
        if as_json:
            console.show_json({"run": folder.name, "job_id": job_id, "cancelled": False})
        console.warning(f"job {job_id} of run {folder.name} already ended ({state}).")
        return
    slurm.cancel(job_id, environ=environ)
    record_job_event(folder, "cancelled", job_id)
    if as_json:
        console.show_json({"run": folder.name, "job_id": job_id, "cancelled": True})
    console.success(f"cancelled job {job_id} of run {folder.name}")
