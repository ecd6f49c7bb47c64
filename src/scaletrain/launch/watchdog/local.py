"""The hang watchdog of a local run (`scaletrain run`): a thread of the launching process that
ends torchrun and every training process when a step hangs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

from scaletrain.core.hang_report import HangReport
from scaletrain.core.rank_files import read_beats, runs_here
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.watchdog.watch import watch_run

# What the watchdog of a local run says, kept beside the ranks' logs.
WATCHDOG_LOG = "watchdog.log"


def end_at_once(folder: RunFolder, launcher: subprocess.Popen[bytes]) -> None:
    """torchrun first (it would restart the processes), then every training process."""
    launcher.kill()
    for beat in read_beats(folder).values():
        if runs_here(beat):
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(beat.pid, signal.SIGKILL)


class LocalWatchdog:
    """The hang watchdog of a local run, in a thread of this process (none for limit 0)."""

    def __init__(self, folder: RunFolder, limit_s: float, child: subprocess.Popen[bytes]):
        self.report: HangReport | None = None
        self._folder, self._child = folder, child
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(limit_s,), name="scaletrain-watchdog", daemon=True
        )
        if limit_s > 0:
            self._thread.start()

    def _watch(self, limit_s: float) -> None:
        self.report = watch_run(
            self._folder, limit_s, end_step=self._end_run, say=self._say, stop=self._stop
        )

    def _say(self, text: str) -> None:
        """On the console, and in logs/watchdog.log for `scaletrain doctor`."""
        line = f"scaletrain watchdog: {text}"
        print(line, file=sys.stderr, flush=True)
        with (self._folder.logs / WATCHDOG_LOG).open("a", encoding="utf-8") as log:
            log.write(line + "\n")

    def _end_run(self, _report: HangReport) -> None:
        end_at_once(self._folder, self._child)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
