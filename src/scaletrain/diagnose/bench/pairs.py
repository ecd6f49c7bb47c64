"""Node-pair mode: all_reduce between two nodes at a time, to find a slow node or link.

Every node meets its neighbours in a ring (0-1, 1-2, ..., last-0), scheduled in rounds of
disjoint pairs so that pairs do not share a link while they are measured. One process per
node (its local rank 0) takes part. A node that is slow in both of its pairs is the suspect;
a single slow pair points at the link between the two.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scaletrain.diagnose.bench.bandwidth import bandwidths_gbps, measure
from scaletrain.runtime.process_group import new_group

if TYPE_CHECKING:
    import torch

# A pair slower than this fraction of the median pair is reported as slow.
SLOW_FRACTION = 0.8


def ring_rounds(num_nodes: int) -> list[list[tuple[int, int]]]:
    """Neighbour pairs of a ring, grouped into rounds in which no node appears twice."""
    if num_nodes < 2:
        return []
    edges = [(i, i + 1) for i in range(num_nodes - 1)]
    if num_nodes > 2:
        edges.append((0, num_nodes - 1))
    rounds: list[list[tuple[int, int]]] = []
    for edge in edges:
        for round_ in rounds:
            if not {node for pair in round_ for node in pair} & set(edge):
                round_.append(edge)
                break
        else:
            rounds.append([edge])
    return rounds


@dataclass(frozen=True, kw_only=True, slots=True)
class PairResult:
    nodes: tuple[int, int]
    size_bytes: int
    time_s: float
    busbw_gbps: float
    correct: bool


def _pair_result(
    nodes: tuple[int, int], size_bytes: int, time_s: float, correct: bool
) -> PairResult:
    _, busbw = bandwidths_gbps("all_reduce", size_bytes, time_s, world_size=2)
    return PairResult(
        nodes=nodes, size_bytes=size_bytes, time_s=time_s, busbw_gbps=busbw, correct=correct
    )


def measure_pairs(
    *,
    node_rank: int,
    local_rank: int,
    num_nodes: int,
    node_leaders: dict[int, int],
    size_bytes: int,
    device: torch.device,
    warmup: int,
    iterations: int,
) -> list[PairResult]:
    """Run every round; returns this process's own pair results (empty if it took no part)."""
    import torch.distributed as dist

    mine = []
    for round_ in ring_rounds(num_nodes):
        # new_group is collective over the whole job: every rank creates every pair's group.
        groups = {pair: new_group([node_leaders[n] for n in pair]) for pair in round_}
        for pair, group in groups.items():
            if group is not None and local_rank == 0 and node_rank in pair:
                measured = measure(
                    "all_reduce",
                    size_bytes,
                    device=device,
                    warmup=warmup,
                    iterations=iterations,
                    group=group,
                )
                time_s = measured.loop_seconds / measured.iterations
                mine.append(_pair_result(pair, measured.size_bytes, time_s, measured.correct))
        dist.barrier()
    return mine


def merge_pairs(results: list[PairResult]) -> list[PairResult]:
    """One result per pair: both members measured it; average their times (as nccl-tests
    averages over ranks) and recompute the bandwidth."""
    by_pair: dict[tuple[int, int], list[PairResult]] = {}
    for result in results:
        by_pair.setdefault(result.nodes, []).append(result)
    merged = []
    for nodes, measured in sorted(by_pair.items()):
        time_s = sum(result.time_s for result in measured) / len(measured)
        correct = all(result.correct for result in measured)
        merged.append(_pair_result(nodes, measured[0].size_bytes, time_s, correct))
    return merged


def slow_pairs(results: list[PairResult]) -> list[PairResult]:
    if not results:
        return []
    median = statistics.median(result.busbw_gbps for result in results)
    return [result for result in results if result.busbw_gbps < SLOW_FRACTION * median]


def suspects(results: list[PairResult]) -> list[int]:
    """Nodes that are slow with every neighbour they met."""
    slow = slow_pairs(results)
    met: dict[int, int] = {}
    for result in results:
        for node in result.nodes:
            met[node] = met.get(node, 0) + 1
    slow_count: dict[int, int] = {}
    for result in slow:
        for node in result.nodes:
            slow_count[node] = slow_count.get(node, 0) + 1
    return sorted(n for n, count in slow_count.items() if count == met[n] and met[n] > 1)
