"""Fault 2: SIGKILL the whole job at random moments while it writes checkpoints, many times.

The run saves after every step (synchronously and, in every other attempt, in the
background), so most kills land inside a write. After each kill the newest complete
checkpoint must be intact, the next attempt must resume from exactly that one, and the run,
finished at last, must end with the weights of an uninterrupted run.

The two ranks are started directly with torch's env:// variables, as `srun` starts one task
per GPU: no launcher process to start 21 times, so the 20 attempts stay cheap.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from scaletrain.checkpoint.layout import CheckpointStore, step_of
from scaletrain.checkpoint.manifest import Manifest, verify_files
from scaletrain.checkpoint.safe_load import check_metadata
from tests.checkpoint.conftest import POLL_S, RESUMABLE, assert_same_weights, pids, weights
from tests.conftest import PROCESS_TIMEOUT_S
from tests.support.ranks import start_ranks
from tests.support.waiting import wait_until

pytestmark = pytest.mark.multiprocess

TRIALS = 20
# Enough steps that 20 short attempts never reach the end: 30 epochs × 16 steps.
OPTIONS = ("--epochs", "30", "--width", "1024", "--every-steps", "1", "--keep", "2")
# A kill comes this long (s, uniform) after the processes have resumed; a save takes about
# as long as a step here, so kills fall inside and between writes.
KILL_WITHIN_S = 0.6


def start_attempt(run: Path, *options: str) -> list[subprocess.Popen[str]]:
    """Both ranks of one attempt, each logging to runs/<name>/logs/rank-N.out. Their temporary
    files go to a folder of the test's own: a killed process cannot remove what it made there
    (torch 2.7 makes a folder per process)."""
    command = [sys.executable, str(RESUMABLE), "--out", str(run / "out"), *options]
    temporary = run.parent / "tmp"
    temporary.mkdir(parents=True, exist_ok=True)
    extra = {"SCALETRAIN_RUN_DIR": str(run), "TMPDIR": str(temporary)}
    return start_ranks(command, 2, extra=extra, logs=run / "logs")


def kill(ranks: list[subprocess.Popen[str]]) -> None:
    for process in ranks:
        process.kill()
    for process in ranks:
        process.wait()


def newest_intact(store: CheckpointStore) -> Path | None:
    """The newest complete checkpoint, after checking that every complete one is intact."""
    complete = store.complete()
    for folder in complete:
        assert verify_files(folder, Manifest.read(folder).files) == [], folder
        check_metadata(folder)
    if (store.root / "LATEST").exists():
        assert store.latest() in complete  # LATEST never names a missing or partial folder
    return complete[0] if complete else None


@pytest.mark.timeout(600)  # 21 starts of 2 processes: ~100 s on a busy 2-core machine
def test_killing_the_job_during_saves_never_loses_the_newest_complete_checkpoint(
    tmp_path: Path, reference: Callable[..., dict[str, torch.Tensor]], storage: str
) -> None:
    run = tmp_path / "runs" / "kills"
    store = CheckpointStore(run / "checkpoints")
    chance = random.Random(20261123)
    expected: Path | None = None
    kills_inside_writes = 0
    for trial in range(TRIALS):
        mode = ("--asynchronous",) if trial % 2 else ()
        for pid_file in (run / "out" / "pids").glob("*.pid"):
            pid_file.unlink()
        ranks = start_attempt(run, *OPTIONS, *mode, "--storage", storage)
        try:
            wait_until(lambda: pids(run) is not None, f"attempt {trial} to resume", pause_s=POLL_S)
            time.sleep(chance.uniform(0, KILL_WITHIN_S))
            assert all(rank.poll() is None for rank in ranks), "the run ended before the kill"
        finally:
            kill(ranks)
        output = (run / "logs" / "rank-0.out").read_text()
        if expected is None:
            assert "resumed from" not in output
        else:
            assert f"resumed from {expected} " in output, output[-2000:]
        kills_inside_writes += any(store.root.glob("*.partial"))
        newest = newest_intact(store)
        if expected is not None:
            assert newest is not None and step_of(newest) >= step_of(expected)  # type: ignore[operator]
        expected = newest

    ranks = start_attempt(run, *OPTIONS, "--storage", storage)
    try:
        assert [rank.wait(timeout=PROCESS_TIMEOUT_S) for rank in ranks] == [0, 0]
    finally:
        kill(ranks)
    assert f"resumed from {expected} " in (run / "logs" / "rank-0.out").read_text()
    # Many kills hit a write in progress (a step folder still named .partial); fewer with the
    # faster direct storage.
    assert kills_inside_writes >= TRIALS // 4, kills_inside_writes
    assert_same_weights(weights(run), reference(*OPTIONS))
