"""Collective bandwidth on every rank: `python -m scaletrain.diagnose.bench`.

Runs under any launcher, like the preflight. Rank 0 prints one table per collective and
writes report/bench.json (raw per-rank timings included) and report/bench.png into the run
folder (or --out). With --pairs it measures pairs of nodes instead, to find a slow one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.plotting import plots_available
from scaletrain.core.run_folder import RunFolder
from scaletrain.diagnose.bench.bandwidth import (
    DEFAULT_CPU_MAX_BYTES,
    DEFAULT_GPU_MAX_BYTES,
    OPS,
    Measurement,
    format_size,
    measure,
    parse_ops,
    parse_size,
    summarize,
    sweep,
)
from scaletrain.diagnose.bench.pairs import PairResult, measure_pairs, merge_pairs
from scaletrain.diagnose.bench.report import (
    BENCH_JSON,
    BENCH_PNG,
    bench_record,
    plot_bandwidth,
    show_bandwidth,
    show_pairs,
)

if TYPE_CHECKING:
    from scaletrain.diagnose.bench.bandwidth import BandwidthRow
    from scaletrain.runtime.layout import DistEnv


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(
        prog="python -m scaletrain.diagnose.bench",
        description="all_reduce/all_gather/reduce_scatter/broadcast bandwidth over a sweep "
        "of message sizes, reported as nccl-tests does (algbw, busbw).",
    )
    options.add_argument("--ops", default=",".join(OPS), help="collectives, comma-separated")
    options.add_argument("--sizes", default="", help="sizes in bytes, e.g. 8,64K,16M")
    options.add_argument(
        "--max-size", default="", help="largest size of the default sweep (GPU 256M, CPU 32M)"
    )
    options.add_argument("--warmup", type=int, default=5, help="untimed calls per size")
    options.add_argument("--iterations", type=int, default=20, help="timed calls per size")
    options.add_argument("--pairs", action="store_true", help="measure pairs of nodes instead")
    options.add_argument("--pair-size", default="16M", help="message size in --pairs mode")
    options.add_argument("--out", default="", help="folder for bench.json/bench.png")
    return options


def _sizes(options: argparse.Namespace, on_gpu: bool) -> list[int]:
    if options.sizes:
        return [parse_size(size) for size in options.sizes.split(",") if size]
    default = DEFAULT_GPU_MAX_BYTES if on_gpu else DEFAULT_CPU_MAX_BYTES
    return sweep(parse_size(options.max_size) if options.max_size else default)


def _out_folder(options: argparse.Namespace) -> Path | None:
    if options.out:
        return Path(options.out)
    folder = RunFolder.from_environ(os.environ)
    return folder.report if folder else None


def run_bench(options: argparse.Namespace) -> int:
    from scaletrain.runtime.process_group import all_gather_objects, init, shutdown

    ops = parse_ops(options.ops)
    env = init()
    sizes = _sizes(options, env.device.type == "cuda")
    hosts_by_rank = all_gather_objects((env.node_rank, env.local_rank, socket.gethostname()))
    leaders = {node: rank for rank, (node, local, _) in enumerate(hosts_by_rank) if local == 0}
    hosts = {node: host for node, local, host in hosts_by_rank if local == 0}

    measured: list[Measurement] = []
    pairs: list[PairResult] = []
    if options.pairs:
        pairs = measure_pairs(
            node_rank=env.node_rank,
            local_rank=env.local_rank,
            num_nodes=env.num_nodes,
            node_leaders=leaders,
            size_bytes=parse_size(options.pair_size),
            device=env.device,
            warmup=options.warmup,
            iterations=options.iterations,
        )
    else:
        for op in ops:
            if env.is_main:
                console.info(
                    f"{op}: {len(sizes)} sizes, {format_size(sizes[0])}..{format_size(sizes[-1])}"
                )
            for size in sizes:
                measured.append(
                    measure(
                        op,
                        size,
                        device=env.device,
                        warmup=options.warmup,
                        iterations=options.iterations,
                    )
                )
    everyone: list[tuple[list[Measurement], list[PairResult]]] = all_gather_objects(
        (measured, pairs)
    )
    if env.is_main:
        rows = summarize([m for m, _ in everyone], env.world_size) if measured else []
        all_pairs = merge_pairs([pair for _, mine in everyone for pair in mine])
        if rows:
            show_bandwidth(console.results(), rows, env.world_size)
        if options.pairs:
            show_pairs(console.results(), all_pairs, hosts)
        _save(options, rows, all_pairs, env, hosts)
    shutdown()
    return 0


def _save(
    options: argparse.Namespace,
    rows: list[BandwidthRow],
    pairs: list[PairResult],
    env: DistEnv,
    hosts: dict[int, str],
) -> None:
    folder = _out_folder(options)
    if folder is None:
        console.info("no run folder (SCALETRAIN_RUN_DIR) or --out: results not saved")
        return
    record = bench_record(
        rows=rows,
        pairs=pairs,
        world_size=env.world_size,
        backend=env.backend,
        device=str(env.device),
        hosts=hosts,
        warmup=options.warmup,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / BENCH_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    console.info(f"saved {folder / BENCH_JSON}")
    if rows and plots_available():
        title = f"{env.world_size} ranks, {env.backend} on {env.device.type}"
        plot_bandwidth(rows, title, folder / BENCH_PNG)
        console.info(f"saved {folder / BENCH_PNG}")
    elif rows:
        console.warning("no PNG: pip install 'scaletrain[plots]' for matplotlib")


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        return run_bench(options)
    except ScaletrainError as problem:
        console.error(problem.problem, problem.hint)
        return 2
