"""The run folder's side of the graceful-stop handshake with job scripts (written by rank 0).

job script -> run   runs/<name>/stop-requested   exists: save at the next step and stop
run -> job script   runs/<name>/stopped.json     the stop checkpoint is complete; every
                                                 process then exits with code 0
next start          both files are removed; a resume appends a line to resumes.jsonl
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scaletrain.checkpoint.layout import write_durably
from scaletrain.checkpoint.manifest import Position
from scaletrain.run_folder import RunFolder

# Counters worth keeping with each resume: how often Slurm requeued the job (unset on the
# first run) and how often torchrun restarted the processes within it.
_RESTART_COUNTERS = {
    "slurm_restart_count": "SLURM_RESTART_COUNT",
    "elastic_restart_count": "TORCHELASTIC_RESTART_COUNT",
}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def clear_stop_files(folder: RunFolder) -> dict[str, Any] | None:
    """Remove stop-requested and stopped.json; return what stopped.json said, if it existed."""
    folder.stop_request.unlink(missing_ok=True)
    stopped: dict[str, Any] | None = None
    if folder.stopped_marker.is_file():
        try:
            stopped = json.loads(folder.stopped_marker.read_text())
        except ValueError:
            stopped = {"reason": "unknown (unreadable stopped.json)"}
        folder.stopped_marker.unlink()
    return stopped


def write_stopped(folder: RunFolder, *, position: Position, reason: str, checkpoint: Path) -> None:
    """Tell the job script that the run saved and stopped, and may be requeued."""
    record = {
        "step": position.step,
        "epoch": position.epoch,
        "reason": reason,
        "checkpoint": str(checkpoint),
        "time": _now(),
    }
    write_durably(folder.stopped_marker, json.dumps(record, indent=2) + "\n")


def record_resume(
    folder: RunFolder,
    *,
    checkpoint: Path,
    position: Position,
    world_size: int,
    saved_world_size: int,
    previous_stop: dict[str, Any] | None,
    environ: Mapping[str, str],
) -> None:
    """Append one line to resumes.jsonl: when, from where, with how many processes, and why."""
    record: dict[str, Any] = {
        "time": _now(),
        "checkpoint": str(checkpoint),
        "step": position.step,
        "epoch": position.epoch,
        "world_size": world_size,
        "saved_world_size": saved_world_size,
        "after_stop": previous_stop.get("reason") if previous_stop else None,
    }
    if "SLURM_JOB_ID" in environ:
        record["slurm_job_id"] = environ["SLURM_JOB_ID"]
    for field, variable in _RESTART_COUNTERS.items():
        if environ.get(variable, "").isdigit():
            record[field] = int(environ[variable])
    with folder.resumes.open("a") as file:
        file.write(json.dumps(record) + "\n")
