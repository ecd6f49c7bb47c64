"""Waiting for what another process does (a file, a log line, a job's state): one poll loop
and one failure message for every test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tests.support.slurm_jobs import JOB_TIMEOUT_S

if TYPE_CHECKING:
    from tests.support.slurm_cluster import SlurmCluster

# Seconds between looks: a condition that runs squeue or reads a log costs nothing at this
# pace; a test that must act within a moment (a second Ctrl-C) passes a shorter one.
PAUSE_S = 0.2


def wait_until(
    condition: Callable[[], bool],
    what: str,
    cluster: SlurmCluster | None = None,
    *,
    timeout_s: float = JOB_TIMEOUT_S,
    pause_s: float = PAUSE_S,
) -> float:
    """Look at `condition` every `pause_s` until it holds; the monotonic time when it did.

    After `timeout_s` the test fails naming `what`, followed by the logs of the test
    `cluster` when the wait was for one of its jobs."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            logs = f"\n{cluster.logs()}" if cluster is not None else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{logs}")
        time.sleep(pause_s)
    return time.monotonic()
