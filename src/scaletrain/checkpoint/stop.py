"""Notice a request to stop training cleanly (time limit soon, preemption, the user).

Two sources: SIGTERM or SIGUSR1 received by this process, and the run folder's
stop-requested file (written by the job script's USR1 trap or by hand), which rank 0 looks
for every few seconds, never every step. The signal handlers only store a number: no I/O,
nothing that could deadlock inside a handler.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

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
