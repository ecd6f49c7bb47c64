"""`scaletrain cancel`: stop a run's newest launch: cancel its Slurm job (noted in
jobs.jsonl), or stop its `scaletrain run` as Ctrl-C does."""

from __future__ import annotations

import socket
from pathlib import Path

from scaletrain.cli.common import (
    JSON_OPTION,
    RUN_ARGUMENT,
    RUNS_DIR_OPTION,
    newest_launch,
    process_environ,
)
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import RunRecord
from scaletrain.launch.local_status import is_running, local_state, on_this_machine, stop
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import JobEvent, record_job_event


def cancel(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a run: cancel its Slurm job (scancel), or stop its `scaletrain run` as Ctrl-C does.

    A Slurm job is noted as cancelled in the run's jobs.jsonl. A local run saves a checkpoint
    and stops (its script resumes with the same command); cancel it again to end every
    process at once.

    Example: [bold]scaletrain cancel mnist-20261123-070302[/bold]
    """
    folder, _, launch = newest_launch(runs_dir, run_name)
    if isinstance(launch, RunRecord):
        _stop_local(folder, launch, as_json=as_json)
    else:
        _cancel_job(folder, launch, as_json=as_json)


def _cancel_job(folder: RunFolder, job: JobEvent, *, as_json: bool) -> None:
    environ = process_environ()
    info = slurm.job_info(job.job_id, environ=environ)
    result = {"run": folder.name, "where": "slurm", "job_id": job.job_id}
    # scancel accepts a job id Slurm has forgotten without a word: ask first.
    if info is None or not info.is_active:
        state = info.state if info else "no longer known to Slurm"
        if as_json:
            console.show_json(result | {"cancelled": False})
        console.warning(f"job {job.job_id} of run {folder.name} already ended ({state}).")
        return
    slurm.cancel(job.job_id, environ=environ)
    record_job_event(folder, "cancelled", job.job_id)
    rehearsal = _cancel_rehearsal(folder, job, environ)
    if as_json:
        found = {"rehearsal_job_id": rehearsal} if rehearsal else {}
        console.show_json(result | {"cancelled": True} | found)
    also = f" and its rehearsal, job {rehearsal}" if rehearsal else ""
    console.success(f"cancelled job {job.job_id} of run {folder.name}{also}")


def _cancel_rehearsal(folder: RunFolder, job: JobEvent, environ: dict[str, str]) -> str | None:
    """The rehearsal the job waits for (`submit --rehearse`), cancelled too while it runs:
    nothing would wait for its verdict. Its id, or None."""
    rehearsal = job.details.get("rehearsal")
    if not rehearsal:
        return None
    info = slurm.job_info(str(rehearsal), environ=environ)
    if info is None or not info.is_active:
        return None
    slurm.cancel(str(rehearsal), environ=environ)
    record_job_event(folder.rehearsal, "cancelled", str(rehearsal))
    return str(rehearsal)


def _stop_local(folder: RunFolder, record: RunRecord, *, as_json: bool) -> None:
    result = {"run": folder.name, "where": "local", "pid": record.pid}
    if not is_running(record):
        if record.finished is None and not on_this_machine(record):
            raise ScaletrainError(
                f"Run {folder.name!r} was started on {record.host}, not on this machine "
                f"({socket.gethostname()}).",
                f"run `scaletrain cancel {folder.name}` on {record.host}.",
            )
        state, _ = local_state(folder, record)
        if as_json:
            console.show_json(result | {"cancelled": False})
        console.warning(f"run {folder.name} is not running: {state}.")
        return
    stop(record)
    if as_json:
        console.show_json(result | {"cancelled": True})
    console.success(
        f"stopping run {folder.name} (scaletrain pid {record.pid}) as Ctrl-C does: its "
        "processes save a checkpoint and stop"
    )
    console.info(
        "  a script without a Checkpointer just stops; the same `scaletrain run` command "
        "resumes; `scaletrain cancel` again ends every process at once"
    )
