"""Metric reduction, rank-0-first and the DistEnv seen by real ranks."""

from __future__ import annotations

import json

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    out = tmp_path_factory.mktemp("collectives")
    result = torchrun(WORKERS / "collectives.py", f"--out={out}", nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)], result.stdout


def test_each_rank_knows_its_place(two_ranks: tuple[list[dict], str]) -> None:
    ranks, _ = two_ranks
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["local_rank"] for r in ranks] == [0, 1]
    for result in ranks:
        assert result["world_size"] == 2
        assert result["launcher"] == "torchrun"
        assert (result["device"], result["backend"]) == ("cpu", "gloo")


def test_metrics_are_reduced_over_all_ranks(two_ranks: tuple[list[dict], str]) -> None:
    ranks, _ = two_ranks
    assert len(ranks) == 2
    for result in ranks:
        assert result["mean_of_rank"] == 0.5
        assert result["total_of_rank_plus_one"] == 3.0
        assert result["many"] == {"a": 0.5, "b": 10.0}


def test_others_wait_until_rank_zero_prepared(two_ranks: tuple[list[dict], str]) -> None:
    ranks, _ = two_ranks
    assert [result["found_ready"] for result in ranks] == [True, True]


def test_print0_prints_once(two_ranks: tuple[list[dict], str]) -> None:
    _, stdout = two_ranks
    assert stdout.count("printed once") == 1
