"""Benchmark 3: `scaletrain bench`'s all_reduce bus bandwidth against a plain timing loop.

    torchrun --standalone --nproc-per-node=2 benchmarks/busbw_vs_plain.py

In the same processes, alternately: scaletrain.diagnose.bandwidth.measure (what
`scaletrain bench` runs) and a loop written with torch.distributed only. Both time 20 calls
after 5 warm-up calls and average over ranks; busbw = size / time × 2(n-1)/n.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain as st
from common import save, spread
from scaletrain.diagnose.bench.bandwidth import bandwidths_gbps, measure

SIZES = [64 * 2**10, 2**20, 4 * 2**20, 16 * 2**20]
ROUNDS, WARMUP, ITERATIONS = 7, 5, 20


def plain_busbw(size_bytes: int) -> float:
    buffer = torch.ones(size_bytes // 4)
    for _ in range(WARMUP):
        dist.all_reduce(buffer)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(ITERATIONS):
        dist.all_reduce(buffer)
    elapsed = torch.tensor(time.perf_counter() - started, dtype=torch.float64)
    dist.all_reduce(elapsed)
    n = dist.get_world_size()
    time_s = elapsed.item() / n / ITERATIONS
    return size_bytes / time_s / 1e9 * 2 * (n - 1) / n


def scaletrain_busbw(size_bytes: int) -> float:
    measured = measure(
        "all_reduce", size_bytes, device=torch.device("cpu"), warmup=WARMUP, iterations=ITERATIONS
    )
    elapsed = torch.tensor(measured.loop_seconds, dtype=torch.float64)
    dist.all_reduce(elapsed)
    n = dist.get_world_size()
    time_s = elapsed.item() / n / ITERATIONS
    _, busbw = bandwidths_gbps(
        "all_reduce", measured.size_bytes, time_s, n
    )  # as scaletrain reports
    return busbw


def main() -> None:
    env = st.init()
    ratios: dict[int, list[float]] = {size: [] for size in SIZES}
    busbw: dict[str, dict[int, list[float]]] = {"scaletrain": {}, "plain": {}}
    for round_ in range(ROUNDS):
        for size in SIZES:
            first, second = (scaletrain_busbw, plain_busbw)[:: 1 if round_ % 2 == 0 else -1]
            a, b = first(size), second(size)
            ours, plain = (a, b) if first is scaletrain_busbw else (b, a)
            busbw["scaletrain"].setdefault(size, []).append(ours)
            busbw["plain"].setdefault(size, []).append(plain)
            ratios[size].append(ours / plain)
    if env.is_main:
        record = {
            "benchmark": "busbw_vs_plain",
            "world_size": env.world_size,
            "backend": env.backend,
            "busbw_gbps": {
                name: {str(size): spread(values) for size, values in by_size.items()}
                for name, by_size in busbw.items()
            },
            "ratio_by_size": {str(size): spread(values) for size, values in ratios.items()},
            "ratio_median": statistics.median(v for values in ratios.values() for v in values),
        }
        print(f"saved {save('busbw_vs_plain', record)}", file=sys.stderr)
    st.shutdown()


if __name__ == "__main__":
    main()
