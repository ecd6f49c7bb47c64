"""Show and save bandwidth results: one table per collective, JSON, and a PNG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from scaletrain.core.plotting import pyplot, save_figure
from scaletrain.diagnose.bench.bandwidth import BandwidthRow, bus_factor, format_size
from scaletrain.diagnose.bench.pairs import PairResult, slow_pairs, suspects

BENCH_JSON = "bench.json"
BENCH_PNG = "bench.png"


def show_bandwidth(console: Console, rows: Sequence[BandwidthRow], world_size: int) -> None:
    for op in dict.fromkeys(row.op for row in rows):
        factor = bus_factor(op, world_size)
        table = Table(
            title=f"{op} on {world_size} ranks (busbw = algbw × {factor:.3g})",
            title_justify="left",
        )
        for column in ("size", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check"):
            table.add_column(column, justify="right")
        for row in (r for r in rows if r.op == op):
            table.add_row(
                format_size(row.size_bytes),
                str(row.count),
                f"{row.time_s * 1e6:,.1f}",
                f"{row.algbw_gbps:.3f}",
                f"{row.busbw_gbps:.3f}",
                "[success]ok[/success]" if row.correct else "[error]WRONG[/error]",
            )
        console.print(table)


def show_pairs(console: Console, results: Sequence[PairResult], hosts: dict[int, str]) -> None:
    slow = slow_pairs(list(results))
    table = Table(title="node pairs: all_reduce between two nodes", title_justify="left")
    for column in ("nodes", "hosts", "size", "time (us)", "busbw (GB/s)", ""):
        table.add_column(column)
    for result in results:
        a, b = result.nodes
        mark = "[error]slow[/error]" if result in slow else ""
        if not result.correct:
            mark = "[error]WRONG[/error]"
        table.add_row(
            f"{a}-{b}",
            f"{hosts.get(a, '?')} - {hosts.get(b, '?')}",
            format_size(result.size_bytes),
            f"{result.time_s * 1e6:,.1f}",
            f"{result.busbw_gbps:.3f}",
            mark,
        )
    console.print(table)
    for node in suspects(list(results)):
        console.print(
            f"[error]node {node} ({hosts.get(node, '?')}) is slow with every neighbour[/error]: "
            f"exclude it (sbatch --exclude={hosts.get(node, '?')}) and report it"
        )


def bench_record(
    *,
    rows: Sequence[BandwidthRow],
    pairs: Sequence[PairResult],
    world_size: int,
    backend: str,
    device: str,
    hosts: dict[int, str],
    warmup: int,
) -> dict[str, Any]:
    return {
        "world_size": world_size,
        "backend": backend,
        "device": device,
        "hosts": {str(node): host for node, host in hosts.items()},
        "warmup": warmup,
        "element_bytes": 4,
        "definitions": {
            "time_s": "mean over ranks of (loop_seconds / iterations)",
            "algbw_gbps": "size_bytes / time_s / 1e9",
            "busbw_gbps": "algbw_gbps × 2(n-1)/n all_reduce, (n-1)/n all_gather and "
            "reduce_scatter, 1 broadcast (nccl-tests)",
        },
        "results": [asdict(row) for row in rows],
        "pairs": [asdict(pair) for pair in pairs],
        "slow_nodes": suspects(list(pairs)),
    }


def plot_bandwidth(rows: Sequence[BandwidthRow], title: str, path: Path) -> None:
    figure, axes = pyplot().subplots(figsize=(8, 4.5))
    for op in dict.fromkeys(row.op for row in rows):
        mine = [row for row in rows if row.op == op]
        axes.plot([r.size_bytes for r in mine], [r.busbw_gbps for r in mine], marker="o", label=op)
    sizes = sorted({row.size_bytes for row in rows})
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [format_size(size) for size in sizes], rotation=45)
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    save_figure(figure, path, dpi=120)
