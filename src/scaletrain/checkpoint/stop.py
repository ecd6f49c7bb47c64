"""Stopping cleanly (time limit soon, preemption, the user): the requests and the handshake.

Requests come from two sources: SIGTERM or SIGUSR1 received by this process, and the run
folder's stop-requested file (written by the job script's USR1 trap or by hand), which rank
0 looks for every few seconds, never every step. The signal handlers only store a number: no
I/O, nothing that could deadlock inside a handler.

The run folder's side of the handshake with job scripts (written by rank 0):

job script -> run   runs/<name>/stop-requested   exists: save at the next vote and stop
run -> job script   runs/<name>/stopped.json     the stop checkpoint is complete; every
                                                 process then exits with code 0
next start          both files are removed; a resume appends a line to resumes.jsonl

No torch here: the files are read by login-node tools too.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from scaletrain.checkpoint.layout import write_durably
from scaletrain.checkpoint.manifest import Position
from scaletrain.core.run_folder import RunFolder

# SIGTERM: Slurm at the time limit and on preemption or scancel, torchrun when it stops.
# SIGUSR1: what generated jobs ask Slurm to send before the time limit (--signal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class TrainingStopped(SystemExit):
    """Raised on every rank once the stop checkpoint is saved; the process exits with code 0.

    A SystemExit, so `except Exception` in user code does not swallow it, `finally` blocks
    still run, and torchrun sees success (a non-zero code would restart the group).
    """

    def __init__(self, *, step: int, reason: str) -> None:
        super().__init__(0)
        self.step = step
        self.reason = reason


class StopRequests:
    """Watches for stop requests on this rank."""

    def __init__(self, *, request_file: Path | None, poll_seconds: float) -> None:
        self._request_file = request_file
        self._poll_seconds = poll_seconds
        self._next_poll = time.monotonic() + poll_seconds
        self._file_seen = False
        self._signal = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Catch the stop signals (possible only in the main thread; elsewhere they keep their
        handlers and only the stop-request file stops the run)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in STOP_SIGNALS:
            self._previous[number] = signal.signal(number, self._note_signal)

    def uninstall(self) -> None:
        """Give the signals back their previous handlers (training is over)."""
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _note_signal(self, number: int, _frame: FrameType | None) -> None:
        self._signal = number

    @property
    def signal_number(self) -> int:
        """The stop signal this process received (0: none)."""
        return self._signal

    def file_seen(self) -> bool:
        """Whether the stop-request file exists; looks at most every `poll_seconds`."""
        if self._request_file is None or self._file_seen:
            return self._file_seen
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self._poll_seconds
            self._file_seen = self._request_file.exists()
        return self._file_seen


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
            stopped = json.loads(folder.stopped_marker.read_text(encoding="utf-8"))
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
    with folder.resumes.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")
