"""`scaletrain bench` with real processes on gloo: tables, JSON and PNG, and bus bandwidth
that follows nccl-tests' formulas when recomputed from the raw timings in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.diagnose.bench.bandwidth import elements_for, parse_size
from scaletrain.diagnose.bench.pairs import PairResult, ring_rounds, suspects
from tests.conftest import scaletrain
from tests.diagnose.conftest import BENCH, run_ranks

# nccl-tests' PERFORMANCE.md, written out here rather than taken from the code under test.
NCCL_TESTS_BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


@pytest.mark.multiprocess
def test_two_rank_sweep_writes_table_json_and_png(tmp_path: Path) -> None:
    result = scaletrain(
        "bench", "--nproc", "2", "--sizes", "8,4K,1M", "--warmup", "2", "--iterations", "5",
        "--name", "b", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for op in NCCL_TESTS_BUS_FACTOR:
        assert f"{op} on 2 ranks" in result.stderr  # the tables; with --json, on stderr
    report = tmp_path / "runs" / "b" / "report"
    assert (report / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((report / "bench.json").read_text())
    assert json.loads(result.stdout) == record  # stdout: the result as JSON, nothing else
    n = record["world_size"]
    assert n == 2 and record["backend"] == "gloo"
    rows = record["results"]
    assert {(row["op"], row["size_bytes"]) for row in rows} == {
        (op, size) for op in NCCL_TESTS_BUS_FACTOR for size in (8, 4096, 2**20)
    }
    for row in rows:
        assert row["correct"] is True
        assert row["size_bytes"] == 4 * row["count"] and row["count"] % n == 0
        loops = row["loop_seconds_per_rank"]
        assert len(loops) == n and all(seconds > 0 for seconds in loops)
        time_s = sum(loops) / n / row["iterations"]
        algbw = row["size_bytes"] / time_s / 1e9
        assert row["time_s"] == pytest.approx(time_s, rel=1e-9)
        assert row["algbw_gbps"] == pytest.approx(algbw, rel=1e-9)
        factor = NCCL_TESTS_BUS_FACTOR[row["op"]](n)
        assert row["busbw_gbps"] == pytest.approx(algbw * factor, rel=1e-9)


@pytest.mark.multiprocess
def test_node_pairs_meet_every_ring_neighbour_once(tmp_path: Path) -> None:
    # Four processes, each a "node" of its own, as srun starts one task per node.
    ranks = run_ranks(
        4,
        ["--pairs", "--pair-size", "64K", "--warmup", "1", "--iterations", "3", "--out",
         str(tmp_path)],
        script=BENCH,
        one_per_node=True,
    )  # fmt: skip
    assert [rank.returncode for rank in ranks] == [0, 0, 0, 0], ranks[0].stderr[-3000:]
    assert "node pairs: all_reduce between two nodes" in ranks[0].stdout
    record = json.loads((tmp_path / "bench.json").read_text())
    pairs = record["pairs"]
    assert sorted(tuple(pair["nodes"]) for pair in pairs) == [(0, 1), (0, 3), (1, 2), (2, 3)]
    for pair in pairs:
        assert pair["correct"] is True and pair["size_bytes"] == 64 * 1024
        # Two ranks: all_reduce busbw = algbw × 2(2-1)/2 = algbw.
        assert pair["busbw_gbps"] == pytest.approx(pair["size_bytes"] / pair["time_s"] / 1e9)


def test_ring_rounds_never_put_a_node_in_two_pairs_at_once() -> None:
    for nodes in range(2, 9):
        rounds = ring_rounds(nodes)
        pairs = [pair for round_ in rounds for pair in round_]
        assert len(pairs) == len(set(pairs)) == (1 if nodes == 2 else nodes)
        for round_ in rounds:
            members = [node for pair in round_ for node in pair]
            assert len(members) == len(set(members))
        assert len(rounds) <= 3


def test_a_node_slow_with_both_neighbours_is_the_suspect() -> None:
    def pair(a: int, b: int, busbw: float) -> PairResult:
        return PairResult(nodes=(a, b), size_bytes=1, time_s=1.0, busbw_gbps=busbw, correct=True)

    results = [pair(0, 1, 20), pair(1, 2, 5), pair(2, 3, 6), pair(0, 3, 21)]
    assert suspects(results) == [2]
    assert suspects([pair(0, 1, 20), pair(1, 2, 19), pair(0, 2, 20)]) == []


def test_sizes_and_element_counts() -> None:
    assert [parse_size(text) for text in ("8", "64K", "256M", "1G")] == [8, 65536, 2**28, 2**30]
    assert elements_for(8, 3) == 3  # at least one element per rank, a multiple of the ranks
    assert elements_for(4096, 3) == 1023
