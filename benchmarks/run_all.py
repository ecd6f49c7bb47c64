"""Run the three diagnostics benchmarks and print one summary table.

    bash benchmarks/run.sh          # installs requirements/benchmarks.txt, then this

Results: benchmarks/results/{step_overhead,startup,busbw_vs_plain}.json and summary.json.
These are measurements, not tests: on a shared 2-core machine read the spread too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, save

HERE = Path(__file__).resolve().parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
LIKE_FOR_LIKE = "scaletrain run --max-restarts 0"
RUNS = {
    "step_overhead": [*TORCHRUN, str(HERE / "step_overhead.py")],
    "startup": [sys.executable, str(HERE / "startup.py")],
    "busbw_vs_plain": [*TORCHRUN, str(HERE / "busbw_vs_plain.py")],
}


def load(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((RESULTS / f"{name}.json").read_text())


def rows() -> list[tuple[str, str, str, str, bool]]:
    """(what, measured, spread, target, met) for each target of the issue."""
    step = load("step_overhead")
    times = step["step_time_s"]
    ratio = step["ratio_to_raw"]
    ms = {name: times[name]["median"] * 1e3 for name in times}

    def range_ms(name: str) -> str:
        return f"{times[name]['min'] * 1e3:.1f}-{times[name]['max'] * 1e3:.1f} ms"

    startup = load("startup")["seconds_to_first_step"]

    def range_s(values: dict[str, float]) -> str:
        return f"{values['min']:.2f}-{values['max']:.2f} s"

    busbw = load("busbw_vs_plain")
    by_size = busbw["ratio_by_size"]
    size_spread = ", ".join(
        f"{int(size) // 1024}K: {s['median']:.2f}" for size, s in by_size.items()
    )
    table = [
        (
            "step time, scaletrain / raw DDP",
            f"{ratio['scaletrain']:.3f} ({ms['scaletrain']:.1f} vs {ms['raw']:.1f} ms)",
            f"raw {range_ms('raw')}, scaletrain {range_ms('scaletrain')}",
            "≤ 1.01",
            ratio["scaletrain"] <= 1.01,
        ),
        (
            "step time, scaletrain vs Fabric, accelerate",
            f"{ms['scaletrain']:.1f} vs {ms['fabric']:.1f}, {ms['accelerate']:.1f} ms",
            f"fabric {range_ms('fabric')}, accelerate {range_ms('accelerate')}",
            "not slower than either",
            ratio["scaletrain"] <= min(ratio["fabric"], ratio["accelerate"]),
        ),
        (
            "command to first step, scaletrain run --max-restarts 0 / torchrun",
            f"{load('startup')['ratio_scaletrain_to_torchrun']:.3f} "
            f"({startup[LIKE_FOR_LIKE]['median']:.2f} vs {startup['torchrun']['median']:.2f} s)",
            f"scaletrain {range_s(startup[LIKE_FOR_LIKE])}, "
            f"torchrun {range_s(startup['torchrun'])}",
            "≤ 1.10",
            load("startup")["ratio_scaletrain_to_torchrun"] <= 1.10,
        ),
        (
            "… scaletrain run's default (3 restarts, restart-safe store) / torchrun",
            f"{load('startup')['ratio_default_with_restarts_to_torchrun']:.3f} "
            f"({startup['scaletrain run']['median']:.2f} s)",
            f"scaletrain {range_s(startup['scaletrain run'])}",
            "(the price of working restarts)",
            True,
        ),
        (
            "all_reduce busbw, scaletrain bench / plain loop",
            f"{busbw['ratio_median']:.3f}",
            size_spread,
            "≥ 0.95",
            busbw["ratio_median"] >= 0.95,
        ),
    ]
    return table


def main() -> None:
    console = Console(stderr=True)
    for name, command in RUNS.items():
        started = time.perf_counter()
        console.print(f"[bold]{name}[/bold]: {' '.join(command[-1:])}")
        subprocess.run(command, check=True, capture_output=True, timeout=900)
        console.print(f"  done in {time.perf_counter() - started:.0f} s")
    summary = Table(title="scaletrain diagnostics benchmarks (2 ranks, gloo, CPU)")
    for column in ("what", "measured (median)", "spread (min-max of repeats)", "target", "met"):
        summary.add_column(column)
    results = rows()
    for what, measured, spread_text, target, met in results:
        summary.add_row(what, measured, spread_text, target, "yes" if met else "[red]no[/red]")
    console.print(summary)
    save(
        "summary",
        {
            "rows": [
                dict(zip(("what", "measured", "spread", "target", "met"), row, strict=True))
                for row in results
            ]
        },
    )


if __name__ == "__main__":
    main()
