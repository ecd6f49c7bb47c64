"""2-process DDP with global batch B must train exactly like 1 process with batch B."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess

EPOCHS, GLOBAL_BATCH, SAMPLES = 2, 8, 100
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH


def train(out: Path, nproc: int) -> None:
    result = torchrun(
        WORKERS / "parity.py",
        f"--out={out}",
        f"--epochs={EPOCHS}",
        f"--global-batch={GLOBAL_BATCH}",
        nproc=nproc,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folders = {nproc: tmp_path_factory.mktemp(f"parity{nproc}") for nproc in (1, 2)}
    for nproc, folder in folders.items():
        train(folder, nproc)
    return folders


def seen(folder: Path, rank: int) -> list[list[int]]:
    return json.loads((folder / f"seen-rank{rank}.json").read_text())


def test_two_ranks_reach_the_same_weights_as_one(runs: dict[int, Path]) -> None:
    single = torch.load(runs[1] / "weights.pt", weights_only=True)
    double = torch.load(runs[2] / "weights.pt", weights_only=True)
    assert single and single.keys() == double.keys()
    for name in single:
        assert not torch.equal(single[name], torch.zeros_like(single[name]))
        torch.testing.assert_close(double[name], single[name], rtol=1e-9, atol=1e-10)


def test_each_rank_sees_a_disjoint_half_of_every_epoch(runs: dict[int, Path]) -> None:
    rank0, rank1 = seen(runs[2], 0), seen(runs[2], 1)
    single = seen(runs[1], 0)
    for epoch in range(EPOCHS):
        assert len(rank0[epoch]) == len(rank1[epoch]) == STEPS_PER_EPOCH * GLOBAL_BATCH // 2
        assert not set(rank0[epoch]) & set(rank1[epoch])
        # Together the ranks consumed exactly the samples the single process consumed.
        assert set(rank0[epoch]) | set(rank1[epoch]) == set(single[epoch])


def test_the_order_changes_between_epochs_without_set_epoch(runs: dict[int, Path]) -> None:
    epochs = seen(runs[2], 0)
    assert epochs[0] != epochs[1]
