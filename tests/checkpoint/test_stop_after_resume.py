"""A resumed run stops as soon after a stop request as a fresh run does.

The ranks agree on stops and timed saves in votes about a second apart, paced by rank 0's
step time. A run resumed at step N once measured that pace from step 0, and spaced its next
vote by the cap, 10,000 steps: a stop request (the job script's USR1 trap before the time
limit, a SIGTERM) then waited minutes on a CPU and up to an hour on a GPU. Here, the loop as
the README teaches it: `scaletrain run` of the resumable worker, stopped, resumed with 10 ms
steps, and stopped again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from scaletrain.core.rank_files import read_beats
from scaletrain.core.run_folder import RunFolder
from tests.checkpoint.conftest import POLL_S, request_stop
from tests.conftest import WORKERS, end_session, kill_session, start_scaletrain
from tests.support.waiting import wait_until

pytestmark = pytest.mark.multiprocess

NAME = "resumed"
# 40 epochs of 256 steps: far more than either launch trains before it is stopped.
WORKER_ARGS = ("--epochs", "40", "--samples", "4096", "--global-batch", "16")
# A stop must come within one vote (about a second: 100 steps of 10 ms) and the stop-file
# poll, with room for a loaded machine, where steps only take longer; the cap is 10,000.
MOST_STEPS_AFTER_THE_REQUEST = 600


def launch(tmp_path: Path, *more: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`scaletrain run` of the worker; beats every 0.5 s (--hang-limit 15), no restarts."""
    command = [
        *("run", "--nproc", "2", "--name", NAME, "--hang-limit", "15", "--max-restarts", "0"),
        *(str(WORKERS / "resumable.py"), "--out", f"runs/{NAME}/out", *WORKER_ARGS, *more),
    ]
    log = tmp_path / f"launch-{len(list(tmp_path.glob('launch-*')))}.log"
    return start_scaletrain(*command, cwd=tmp_path, log=log), log


def current_step(run: Path) -> int:
    beats = read_beats(RunFolder(run))
    return min((beat.step for beat in beats.values()), default=0) if len(beats) == 2 else 0


def stopped_step(run: Path) -> int:
    return int(json.loads((run / "stopped.json").read_text())["step"])


@pytest.mark.parametrize("request_by", ["stop-requested", "SIGTERM"])
def test_a_resumed_run_stops_within_a_vote_of_the_request(tmp_path: Path, request_by: str) -> None:
    run = tmp_path / "runs" / NAME
    first, _ = launch(tmp_path)
    try:
        wait_until(
            lambda: current_step(run) >= 1000,
            "the first launch to train 1000 steps",
            pause_s=POLL_S,
        )
        request_stop(run)
        assert end_session(first) == 0
    finally:
        kill_session(first)
    resumed_at = stopped_step(run)
    second, log = launch(tmp_path, "--step-seconds", "0.01")
    try:
        # Past the first votes of the resumed run, which measure its pace.
        wait_until(
            lambda: current_step(run) >= resumed_at + 100,
            "the resumed run to train a while",
            pause_s=POLL_S,
        )
        requested_at = current_step(run)
        if request_by == "stop-requested":
            request_stop(run)
        else:
            pid = int((run / "out" / "pids" / "rank-1.pid").read_text())
            os.kill(pid, signal.SIGTERM)
        # The stop ends the run with 0; SIGTERM to one rank makes torchrun exit 1 after its
        # processes saved and stopped (test_graceful_stop.py).
        end_session(second)
    finally:
        kill_session(second)
    stopped_at = stopped_step(run)
    assert stopped_at > requested_at, log.read_text()[-2000:]
    assert stopped_at - requested_at <= MOST_STEPS_AFTER_THE_REQUEST, (
        f"resumed at {resumed_at}, stop requested at {requested_at}, stopped at {stopped_at}"
    )
