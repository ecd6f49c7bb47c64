"""Start and stop the sampler (observe/monitor/) beside a local run (`scaletrain run`,
`scaletrain scale`): a process of its own, started with `python -m`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from scaletrain.core import in_job_modules
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import MONITOR_INTERVAL, RUN_DIR

_STOP_TIMEOUT_S = 10


def sampler_variables(folder: RunFolder, interval_s: float) -> dict[str, str]:
    """What the sampler reads: the run folder and the interval."""
    return {RUN_DIR: str(folder.root.resolve()), MONITOR_INTERVAL: f"{interval_s:g}"}


def start_sampler(
    folder: RunFolder, interval_s: float, environ: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """The sampler as a child of this process; it ends with `stop_sampler` or with us."""
    return subprocess.Popen(
        [sys.executable, "-m", in_job_modules.SAMPLER, "--watch", str(os.getpid())],
        env={**environ, **sampler_variables(folder, interval_s)},
        stdout=subprocess.DEVNULL,
    )


def stop_sampler(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (it closes its files), SIGKILL if it does not end."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
