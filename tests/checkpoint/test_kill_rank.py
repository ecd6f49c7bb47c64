"""Fault 1: kill -9 one rank mid-run; torchrun restarts the group, which resumes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.checkpoint.conftest import (
    assert_same_weights,
    interrupted_run,
    json_lines,
    pids,
    weights,
)
from tests.support.leftovers import children, new_children_after

pytestmark = pytest.mark.multiprocess


def test_a_killed_rank_restarts_the_group_and_the_run_ends_bit_identical(
    tmp_path: Path, reference: Callable[..., dict[str, torch.Tensor]], storage: str
) -> None:
    run = tmp_path / "runs" / "killed"
    # One DataLoader worker per rank: batches are prefetched, the position must still be
    # the batches consumed, not the ones loaded.
    options = ("--every-steps", "5", "--workers", "1")
    first_pids: list[int] = []
    before = children()

    def kill_rank_one(run: Path, _: object) -> None:
        found = pids(run)
        assert found is not None and len(found) == 2, f"no PID files of both ranks: {found}"
        first_pids.extend(found)
        os.kill(first_pids[1], signal.SIGKILL)

    exit_code, log = interrupted_run(
        tmp_path,
        "killed",
        *options,
        "--storage",
        storage,
        when=lambda run: (run / "checkpoints/step-0000010").is_dir(),  # two checkpoints
        interrupt=kill_rank_one,
        restarts=3,
    )
    assert exit_code == 0, log[-3000:]

    resumes = json_lines(run / "resumes.jsonl")
    assert len(resumes) == 1
    assert resumes[0]["elastic_restart_count"] == 1  # torchrun restarted the group once
    assert 10 <= resumes[0]["step"] < 48  # mid-run, from a periodic checkpoint
    # New processes, both of them, finished the run (each rank rewrites its PID file).
    restarted = pids(run)
    assert restarted is not None and len(restarted) == 2
    assert not set(restarted) & set(first_pids), (first_pids, restarted)
    assert f"resumed from {run / 'checkpoints'}" in log
    assert_same_weights(weights(run), reference(*options))
    # Nothing of the killed rank outlives the run: not its DataLoader worker, forkserver or
    # resource tracker (the session is their subreaper, so they would be its children now),
    # and not the temporary folder the run's processes used.
    assert new_children_after(before) == {}
    assert not list(Path(os.environ["TMPDIR"]).glob("scaletrain-killed-*"))
