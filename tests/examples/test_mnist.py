"""The MNIST example end to end, as the README's demo runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, scaletrain

pytestmark = pytest.mark.multiprocess

EXAMPLE = REPO / "examples" / "mnist" / "train.py"
# Documented in examples/mnist/README.md for the small stand-in data.
DOCUMENTED_ACCURACY = 0.90


def train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return scaletrain(
        "run",
        "--nproc",
        "2",
        "--name",
        "mnist",
        str(EXAMPLE),
        "--data-dir",
        str(tmp_path / "data"),
        "--create-small-data",
        *args,
        cwd=tmp_path,
    )


def test_two_processes_train_to_the_documented_accuracy_then_resume(tmp_path: Path) -> None:
    result = train(tmp_path, "--epochs", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    # The stand-in data was written in MNIST's own format, where torchvision looks for it.
    raw = tmp_path / "data" / "MNIST" / "raw"
    assert (raw / "train-images-idx3-ubyte").stat().st_size == 16 + 1498 * 28 * 28
    summary = json.loads((tmp_path / "runs/mnist/metrics/summary.json").read_text())
    assert summary["test_accuracy"] >= DOCUMENTED_ACCURACY
    # Progress was visible while training: steps, loss and throughput.
    assert "step 69/69 100%" in result.stdout and "samples/s" in result.stdout
    assert "test_accuracy" in result.stdout  # the final summary table is the result
    assert "SyncBatchNorm" not in result.stderr  # our own example warns about nothing
    history = [json.loads(line) for line in (tmp_path / "runs/mnist/metrics/train.jsonl").open()]
    assert history[-1]["loss"] < history[0]["loss"]
    # Checkpoints by default: the final one, and the same command with more epochs goes on.
    assert (tmp_path / "runs/mnist/checkpoints/LATEST").read_text() == "step-0000069\n"
    more = train(tmp_path, "--epochs", "4")
    assert more.returncode == 0, more.stderr[-3000:]
    assert "resumed from" in more.stderr and "(step 69, epoch 3," in more.stderr
    assert "step 92/92 100%" in more.stdout and "epoch 2:" not in more.stdout  # one more epoch
    # The finished run stays finished: the same command again trains nothing, says so, and
    # keeps the summary of the training that happened.
    summary_file = tmp_path / "runs/mnist/metrics/summary.json"
    finished = summary_file.read_bytes()
    again = train(tmp_path, "--epochs", "4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "this run finished all 4 epochs already (step 92); nothing to train" in again.stderr
    assert "from an earlier launch (this one trained no step)" in again.stdout
    assert summary_file.read_bytes() == finished


def test_no_checkpoints_saves_nothing_and_micro_batches_train_too(tmp_path: Path) -> None:
    result = train(tmp_path, "--epochs", "1", "--no-checkpoints", "--accumulation-steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "runs/mnist/checkpoints").exists()
    # Two micro-batches per step (gradients averaged over ranks only at the second): the
    # same 23 steps per epoch, and the loss falls.
    assert "step 23/23 100%" in result.stdout
    history = [json.loads(line) for line in (tmp_path / "runs/mnist/metrics/train.jsonl").open()]
    assert history[-1]["loss"] < history[0]["loss"]


def test_missing_dataset_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    # No restarts: a missing data set fails the same way every time.
    result = scaletrain(
        "run",
        "--max-restarts",
        "0",
        str(EXAMPLE),
        "--data-dir",
        str(tmp_path / "none"),
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert f"not found in {tmp_path / 'none' / 'MNIST' / 'raw'}" in result.stderr
    assert "--create-small-data" in result.stderr
