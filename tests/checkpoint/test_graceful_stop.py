"""The runtime half of the graceful-stop handshake, without Slurm.

A stop request (the stop-requested file a job script's USR1 trap writes, or SIGTERM/SIGUSR1
to one training process) must end a 2-process `scaletrain run` with a checkpoint,
stopped.json and exit code 0; the same command then resumes and ends bit-identical.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from scaletrain.checkpoint.layout import CheckpointStore
from tests.checkpoint.conftest import (
    POLL_S,
    assert_same_weights,
    interrupted_run,
    json_lines,
    pids,
    request_stop,
    run_args,
    weights,
)
from tests.conftest import scaletrain
from tests.support.waiting import wait_until

pytestmark = pytest.mark.multiprocess

OPTIONS = ("--every-steps", "100")  # no periodic save before the stop: the stop saves
TOTAL_STEPS = 48  # 3 epochs × 16 steps


@pytest.mark.parametrize(
    ("request_by", "reason"),
    [
        ("stop-requested", "stop-requested"),
        ("SIGTERM", "SIGTERM"),
        ("SIGUSR1", "SIGUSR1"),
        # Slurm signals every process of the step, torchrun included: torchrun passes the
        # SIGTERM to its processes and itself exits 1 once they stopped.
        ("SIGTERM to scaletrain run", "SIGTERM"),
        # Ctrl-C at the terminal: SIGINT to the foreground process group. It stops as
        # SIGTERM does, not with a KeyboardInterrupt in every rank.
        ("Ctrl-C", "SIGTERM"),
    ],
)
def test_a_stop_request_saves_exits_zero_and_the_same_command_resumes(
    tmp_path: Path,
    reference: Callable[..., dict[str, torch.Tensor]],
    request_by: str,
    reason: str,
) -> None:
    def stop(run: Path, launcher: subprocess.Popen[bytes]) -> None:
        if request_by == "stop-requested":
            request_stop(run)
        elif request_by == "SIGTERM to scaletrain run":
            launcher.send_signal(signal.SIGTERM)
        elif request_by == "Ctrl-C":
            os.killpg(launcher.pid, signal.SIGINT)  # its session's leader: the terminal's group
        else:
            os.kill((pids(run) or [])[1], getattr(signal, request_by))  # one rank only

    exit_code, first = interrupted_run(
        tmp_path,
        "stoppable",
        *OPTIONS,
        when=lambda run: (run / "metrics" / "train.jsonl").is_file(),  # a step was done
        interrupt=stop,
        restarts=3,
    )
    run = tmp_path / "runs" / "stoppable"
    assert exit_code == 0, first[-3000:]

    stopped = json.loads((run / "stopped.json").read_text())
    assert stopped["reason"] == reason
    assert 0 < stopped["step"] < TOTAL_STEPS
    checkpoint = Path(stopped["checkpoint"])
    assert checkpoint in CheckpointStore(run / "checkpoints").complete()
    assert checkpoint.name == f"step-{stopped['step']:07d}"
    assert f"stopped at step {stopped['step']} ({reason}); run the same command" in first
    assert "Traceback" not in first and "KeyboardInterrupt" not in first
    assert not (run / "logs" / "restart-1").exists()  # exit code 0: torchrun did not restart

    again = scaletrain(*run_args("stoppable", *OPTIONS), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "finished" in again.stdout  # the summary table is the result
    assert not (run / "stopped.json").exists() and not (run / "stop-requested").exists()
    resumes = json_lines(run / "resumes.jsonl")
    assert [(line["step"], line["after_stop"]) for line in resumes] == [(stopped["step"], reason)]
    assert_same_weights(weights(run), reference(*OPTIONS))


def test_ctrl_c_twice_ends_every_process_at_once(tmp_path: Path) -> None:
    """The second Ctrl-C does not wait for the checkpoint: torchrun and every rank end now.
    Here the first could never finish: rank 1 is stuck inside a step."""
    run = tmp_path / "runs" / "impatient"
    ranks: list[int] = []

    def twice(run: Path, launcher: subprocess.Popen[bytes]) -> None:
        ranks.extend(pids(run) or [])
        os.killpg(launcher.pid, signal.SIGINT)
        wait_until(
            lambda: "Ctrl-C: saving a checkpoint" in log.read_text(), "the first", pause_s=POLL_S
        )
        os.killpg(launcher.pid, signal.SIGINT)

    log = tmp_path / "impatient.log"
    stuck = ("--sleep-rank", "1", "--sleep-at-step", "2")
    exit_code, output = interrupted_run(
        tmp_path,
        "impatient",
        *OPTIONS,
        *stuck,
        when=lambda run: pids(run) is not None and (run / "out" / "slept").exists(),
        interrupt=twice,
    )
    assert exit_code != 0, output[-3000:]
    assert "scaletrain: Ctrl-C again: ending every process now" in output
    assert not (run / "stopped.json").exists()  # no stop checkpoint was waited for
    for pid in ranks:  # ended (a zombie until the test session, their reaper, reaps it)
        status = Path(f"/proc/{pid}/status")
        text = status.read_text(encoding="utf-8") if status.exists() else "State: gone"
        state = text.split("State:")[1].split()[0]
        assert state in ("Z", "gone"), f"rank process {pid} is still running ({state})"
