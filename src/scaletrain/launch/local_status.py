"""A `scaletrain run` launch seen from another shell (`status`, `logs`, `cancel`): whether it
still runs, what rank 0 printed, and stopping it as Ctrl-C does.

run.json names the machine and the pid of the `scaletrain run` process. That pid counts as
the launch's only if its process started no later than the launch did: once the launch
ended, a later process may get the same pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import FileTail, read_text
from scaletrain.core.rank_files import process_start_ticks
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import RunRecord

# New output shows within this many seconds.
_READ_INTERVAL_S = 0.5
# run.json's start time has whole seconds, as has the kernel's boot time (/proc/stat btime).
_CLOCK_SLACK_S = 2.0


def on_this_machine(record: RunRecord) -> bool:
    return record.host == socket.gethostname()


def is_running(record: RunRecord) -> bool:
    """Whether the launch's `scaletrain run` process still runs, here."""
    if record.finished is not None or record.pid is None or not on_this_machine(record):
        return False
    started = _process_start(record.pid)
    launched = datetime.fromisoformat(record.started).timestamp() if record.started else 0.0
    return started is not None and started <= launched + _CLOCK_SLACK_S


def _process_start(pid: int) -> float | None:
    """When the process with this pid started (Unix time), or None if none runs here."""
    if not 0 < pid < 2**22:  # 0 and below would mean process groups
        return None
    ticks = process_start_ticks(pid)
    if ticks is None:
        return None
    with Path("/proc/stat").open(encoding="utf-8") as kernel:
        boot = next(int(line.split()[1]) for line in kernel if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def local_state(folder: RunFolder, record: RunRecord) -> tuple[str, str]:
    """What the launch is doing or how it ended, and the style to show it in."""
    if record.finished is None:
        if is_running(record):
            return f"running (scaletrain pid {record.pid})", "info"
        return "ended without recording how (killed, or its machine stopped)", "warning"
    stopped = read_run_json(folder.stopped_marker)
    if stopped is not None:
        return (
            f"stopped at step {stopped.get('step', '?')} ({stopped.get('reason', '?')}); "
            "run the same command to resume",
            "warning",
        )
    if record.exit_code == 0:
        return "finished", "success"
    return f"failed (exit code {record.exit_code})", "error"


def read_run_json(path: Path) -> dict[str, Any] | None:
    """A small JSON object the run wrote, or None if it is not there or not readable."""
    if not path.is_file():
        return None
    try:
        data = json.loads(read_text(path, "run file"))
    except (ScaletrainError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def rank0_output(folder: RunFolder) -> tuple[Path, Path]:
    """Rank 0's stdout and stderr files of the launch's last attempt (logs/, or
    logs/restart-N/ after the Nth restart of the processes)."""
    logs = folder.last_attempt_logs()
    return logs / "rank-0.out", logs / "rank-0.err"


def follow_local_output(
    folder: RunFolder,
    record: RunRecord,
    *,
    write: Callable[[str], None],
    write_error: Callable[[str], None],
) -> None:
    """Pass rank 0's new stdout to `write` and stderr to `write_error` until the launch ends."""
    out, err = FileTail(), FileTail()
    while True:
        running = is_running(record)  # before reading: what follows its end is read once more
        out_file, err_file = rank0_output(folder)
        if text := out.new_text(out_file):
            write(text)
        if text := err.new_text(err_file):
            write_error(text)
        if not running:
            return
        time.sleep(_READ_INTERVAL_S)


def stop(record: RunRecord) -> None:
    """Ctrl-C, once, to the launch's `scaletrain run`: it has its processes save a checkpoint
    and stop (SIGTERM to torchrun); a second one ends every process at once."""
    if record.pid is not None:
        os.kill(record.pid, signal.SIGINT)
