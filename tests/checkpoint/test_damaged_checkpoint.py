"""A damaged newest checkpoint is named, set aside (not deleted), and the previous one used."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from scaletrain.checkpoint.storage import STORAGES
from tests.checkpoint.conftest import assert_same_weights, json_lines, run_args, weights
from tests.conftest import scaletrain

pytestmark = pytest.mark.multiprocess

OPTIONS = ("--every-steps", "8", "--keep", "3")


class Run(NamedTuple):
    """A run folder's runs/ and the worker's option that names its storage."""

    runs: Path
    storage: tuple[str, str]


@pytest.fixture(scope="module", params=STORAGES)
def two_epochs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A run folder after 2 of 3 epochs on each storage: complete checkpoints at steps 16, 24
    and 32; the storage's option."""
    folder = tmp_path_factory.mktemp("damaged")
    storage = ("--storage", request.param)
    result = scaletrain(*run_args("run", *OPTIONS, *storage, "--epochs", "2"), cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = sorted(path.name for path in (folder / "runs/run/checkpoints").iterdir())
    assert checkpoints == ["LATEST", "step-0000016", "step-0000024", "step-0000032"]
    return Run(folder / "runs", storage)


def truncate(checkpoint: Path) -> None:
    shard = checkpoint / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:1000])


def garble(checkpoint: Path) -> None:
    shard = checkpoint / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    shard.write_bytes(bytes(data))


def garble_metadata(checkpoint: Path) -> None:
    metadata = checkpoint / ".metadata"
    data = bytearray(metadata.read_bytes())
    data[-10] ^= 0x01  # DCP reads it before the shards: it is checked first
    metadata.write_bytes(bytes(data))


def garble_manifest(checkpoint: Path) -> None:
    (checkpoint / "checkpoint.json").write_text('{"position": ')


@pytest.mark.parametrize("damage", [truncate, garble, garble_metadata, garble_manifest])
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(
    tmp_path: Path,
    two_epochs: Run,
    reference: Callable[..., dict[str, torch.Tensor]],
    damage: Callable[[Path], None],
) -> None:
    shutil.copytree(two_epochs.runs, tmp_path / "runs")
    run = tmp_path / "runs" / "run"
    newest = run / "checkpoints" / "step-0000032"
    damage(newest)
    damaged_files = {path.name: path.read_bytes() for path in newest.iterdir() if path.is_file()}

    options = (*OPTIONS, *two_epochs.storage, "--epochs", "3")
    result = scaletrain(*run_args("run", *options), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"checkpoint {newest} is damaged: " in result.stderr
    assert "Renamed it to step-0000032.damaged; trying the previous one." in result.stderr
    assert f"resumed from {run / 'checkpoints' / 'step-0000024'} (step 24" in result.stderr
    assert json_lines(run / "resumes.jsonl")[-1]["step"] == 24
    # Nothing of the damaged checkpoint was deleted or changed.
    kept = run / "checkpoints" / "step-0000032.damaged"
    assert {path.name: path.read_bytes() for path in kept.iterdir() if path.is_file()} == (
        damaged_files
    )
    assert_same_weights(weights(run), reference(*OPTIONS, "--epochs", "3"))


def test_when_every_checkpoint_is_damaged_the_run_stops_and_stays_stopped(
    tmp_path: Path, two_epochs: Run
) -> None:
    shutil.copytree(two_epochs.runs, tmp_path / "runs")
    checkpoints = tmp_path / "runs" / "run" / "checkpoints"
    for step in (16, 24, 32):
        truncate(checkpoints / f"step-{step:07d}")
    # An elastic restart after the failure must not train from scratch in the same run.
    options = (*OPTIONS, *two_epochs.storage, "--epochs", "3")
    result = scaletrain(*run_args("run", *options, restarts=1), cwd=tmp_path)
    assert result.returncode != 0
    assert f"Every checkpoint in {checkpoints} is damaged (set aside as step-*.damaged)" in (
        result.stderr
    )
    assert "the run does not start over by itself" in result.stderr
    assert sorted(path.name for path in checkpoints.iterdir()) == [
        "LATEST",
        "step-0000016.damaged",
        "step-0000024.damaged",
        "step-0000032.damaged",
    ]
    assert not (tmp_path / "runs" / "run" / "resumes.jsonl").exists()
