"""Fault 4: a run saved by 4 processes resumes with 2 and continues where it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load

from scaletrain.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner
from tests.checkpoint.conftest import (
    interrupted_run,
    json_lines,
    request_stop,
    run_args,
    weights,
)
from tests.conftest import scaletrain

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
]

TOTAL_STEPS = 48  # 3 epochs × 16 steps of 16 samples, whatever the number of processes


def saved_model(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model weights in a checkpoint, read with DCP in this (non-distributed) process."""
    reader = SafeFileSystemReader(checkpoint)
    model = {
        fqn.removeprefix("model."): torch.zeros(entry.size, dtype=entry.properties.dtype)
        for fqn, entry in reader.read_metadata().state_dict_metadata.items()
        if fqn.startswith("model.") and isinstance(entry, TensorStorageMetadata)
    }
    load({"model": model}, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    return model


def test_four_processes_save_mid_epoch_and_two_resume_without_a_jump(
    tmp_path: Path, storage: str
) -> None:
    options = ("--every-steps", "4", "--stop-check-seconds", "0.05", "--storage", storage)
    exit_code, four = interrupted_run(
        tmp_path,
        "resized",
        *options,
        when=lambda run: (run / "checkpoints" / "step-0000020").is_dir(),
        interrupt=lambda run, _: request_stop(run),
        nproc=4,
    )
    assert exit_code == 0, four[-3000:]
    run = tmp_path / "runs" / "resized"
    stopped = json.loads((run / "stopped.json").read_text())
    saved_at = stopped["step"]
    assert 20 <= saved_at < TOTAL_STEPS
    before = json_lines(run / "metrics" / "train.jsonl")
    # Read now: the resumed run's own saves retire this checkpoint (keep 3).
    saved = saved_model(Path(stopped["checkpoint"]))

    two = scaletrain(*run_args("resized", *options, "--dump-start", nproc=2), cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]

    resumed = json_lines(run / "resumes.jsonl")[-1]
    assert (resumed["saved_world_size"], resumed["world_size"]) == (4, 2)
    assert resumed["step"] == saved_at
    # The 2 processes start from exactly the weights the 4 saved (resharded by DCP).
    start = weights(run, "start-weights.pt")
    assert start and start.keys() == saved.keys()
    assert all(torch.equal(start[name], saved[name]) for name in start)

    after = json_lines(run / "metrics" / "train.jsonl")[len(before) :]
    # The rest of the interrupted epoch and the next one, each step once, none repeated.
    assert [line["step"] for line in after] == list(range(saved_at + 1, TOTAL_STEPS + 1))
    first_loss = before[0]["loss"]
    last_before = sum(line["loss"] for line in before[-3:]) / 3
    # The loss goes on from where it was: nearer to its last value than to the start.
    assert abs(after[0]["loss"] - last_before) < abs(first_loss - last_before) / 2
    assert sum(line["loss"] for line in after[-3:]) / 3 < last_before  # and keeps falling
