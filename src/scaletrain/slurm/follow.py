"""Follow a job's Slurm output file while the job runs (`scaletrain logs --follow`).

The loop ends by itself when Slurm says the job ended (or no longer knows it). A requeued job
keeps its id and output file name; a file that shrank was rewritten from the start by the
rerun (no --open-mode=append), so reading starts over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import job_output_file
from scaletrain.slurm.output import JobInfo

# New output shows within this many seconds; asking Slurm for the state is rarer (controller load).
_READ_INTERVAL_S = 0.5
_STATE_INTERVAL_S = 2.0


@dataclass(slots=True)
class _Reader:
    """Reads what was appended to a file since the last call."""

    path: Path | None = None
    position: int = 0

    def new_text(self, path: Path | None) -> str:
        if path is None:
            return ""
        if path != self.path:
            self.path, self.position = path, 0
        size = path.stat().st_size
        if size < self.position:
            self.position = 0
        with path.open("rb") as file:
            file.seek(self.position)
            data = file.read()
        self.position += len(data)
        return data.decode("utf-8", errors="replace")


def follow_job_output(
    folder: RunFolder,
    job_id: str,
    *,
    environ: Mapping[str, str],
    write: Callable[[str], None],
    on_waiting: Callable[[JobInfo], None],
    on_quiet: Callable[[float], None] = lambda _seconds: None,
) -> JobInfo | None:
    """Pass new output of the job to `write` until the job ends; return its final state.

    `on_waiting` is told once per state while the job has no output file yet (PENDING...);
    `on_quiet` every few seconds while it runs, how long ago its last output came.
    """
    reader = _Reader()
    last_waiting_state = ""
    info = slurm.job_info(job_id, environ=environ)
    next_state_check = time.monotonic() + _STATE_INTERVAL_S
    last_output = time.monotonic()
    while info is not None and info.is_active:
        output_file = job_output_file(folder, job_id)
        if output_file is None and info.state != last_waiting_state:
            on_waiting(info)
            last_waiting_state = info.state
        if text := reader.new_text(output_file):
            write(text)
            last_output = time.monotonic()
        time.sleep(_READ_INTERVAL_S)
        if time.monotonic() >= next_state_check:
            info = slurm.job_info(job_id, environ=environ)
            next_state_check = time.monotonic() + _STATE_INTERVAL_S
            if info is not None and info.state == "RUNNING":
                on_quiet(time.monotonic() - last_output)
    # Slurm writes the last lines before it marks the job ended: read them now.
    if text := reader.new_text(job_output_file(folder, job_id)):
        write(text)
    return info
