"""Run every benchmark, then write the one place their figures are read from.

    bash benchmarks/run.sh                 # installs requirements/benchmarks.txt, then this
    python benchmarks/run_all.py --summary # only rewrite summary.md from the saved results

Results: benchmarks/results/<benchmark>.json (committed), machine.json (what they ran on)
and summary.md, the table that README.md and docs/ point to. These are measurements, not
tests: on a shared 2-core machine read the spread too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, save

HERE = Path(__file__).resolve().parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
LIKE_FOR_LIKE = "scaletrain run --max-restarts 0"
RUNS = {
    "step_overhead": [*TORCHRUN, str(HERE / "step_overhead.py")],
    "startup": [sys.executable, str(HERE / "startup.py")],
    "busbw_vs_plain": [*TORCHRUN, str(HERE / "busbw_vs_plain.py")],
    "loop_overhead": [sys.executable, str(HERE / "loop_overhead.py")],
    "checkpoint_cost": [sys.executable, str(HERE / "checkpoint_cost.py")],
    "strategies": [sys.executable, str(HERE / "strategies.py")],
    "monitor_overhead": [sys.executable, str(HERE / "monitor_overhead.py")],
    "analyze_vs_hta": [sys.executable, str(HERE / "analyze_vs_hta.py")],
    "heartbeat_overhead": [sys.executable, str(HERE / "heartbeat_overhead.py")],
}
SUMMARY = RESULTS / "summary.md"
PACKAGES = ("torch", "scaletrain", "lightning-fabric", "accelerate")
# "Flat from 2 to 16 ranks": the README loop's per-step cost may differ by this much between
# sizes; anything that grew with the ranks (a collective per step: 2(N-1) latencies) would
# add hundreds of microseconds.
FLAT_US = 5.0


def load(name: str) -> dict[str, Any]:
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
            "≤ 1.05",
            load("startup")["ratio_default_with_restarts_to_torchrun"] <= 1.05,
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


def machine() -> dict[str, Any]:
    """What the benchmarks ran on: CPU, cores, memory, load, versions."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines()
        if line.startswith("MemTotal")
    )
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(memory_kb / 1024**2, 1),
        "load_average_1_5_15_min": [round(load, 2) for load in os.getloadavg()],
        "python": platform.python_version(),
        "versions": versions,
    }


def checkpoint_rows() -> list[tuple[str, str, str, str, bool]]:
    """Save and load throughput of scaletrain on each storage against plain DCP (the direct
    storage's targets: saves 1.3 x, loads 1.1 x plain DCP's, or it is not kept), and what an
    asynchronous save costs the loop next to a synchronous one, per number of ranks."""
    cost = load("checkpoint_cost")
    state = f"{cost['settings']['state_mb']:.0f} MB"
    targets = {"save": 1.3, "load": 1.1}
    rows = []
    for ranks, result in cost["by_ranks"].items():
        summary = result["summary"]
        each = summary["mb_per_s_each_round"]
        for kind, plain in (("save", "plain write"), ("load", "plain read")):
            rates = summary["mb_per_s"][kind]
            for storage in ("dcp", "direct"):
                name = f"scaletrain {storage}"
                ratio = summary[f"{kind}_vs_plain_DCP"][name]
                target = targets[kind] if storage == "direct" else None
                rows.append((
                    f"{kind} of {state}, scaletrain on storage {storage!r} / plain DCP, "
                    f"{ranks} rank(s)",
                    f"{ratio:.2f} ({rates[name]:,.0f} vs {rates['plain DCP']:,.0f} MB/s; "
                    f"{plain} {rates[plain]:,.0f})",
                    spread(kind, each[kind][name], "MB/s"),
                    f"≥ {target}" if target else "-",
                    target is not None and ratio >= target,
                ))  # fmt: skip
        rows += [async_row(ranks, summary, who) for who in ("plain DCP", "scaletrain dcp",
                                                            "scaletrain direct")]  # fmt: skip
    return rows


def async_row(ranks: str, summary: dict[str, Any], who: str) -> tuple[str, str, str, str, bool]:
    """An asynchronous save's slowdown of the loop against the same saver's synchronous
    stall, and the CPU time each added to rank 0."""
    what = (
        f"{who}: asynchronous save's slowdown of the loop / a synchronous save's, {ranks} rank(s)"
    )
    sync, asynchronous = summary["loops"][f"{who} sync"], summary["loops"][f"{who} async"]
    stall, slowdown = sync["stall_s"], asynchronous["stall_s"]
    each = summary["loops_each_round"]
    rounds = (
        f"sync {min(each[f'{who} sync']['stall']):.2f}-{max(each[f'{who} sync']['stall']):.2f} s, "
        f"async {min(each[f'{who} async']['stall']):.2f}-{max(each[f'{who} async']['stall']):.2f} s"
    )
    cpu = f"; CPU added {asynchronous['cpu_s']:.2f} vs {sync['cpu_s']:.2f} s"
    if stall <= 0:  # the synchronous stall drowned in the steps' noise: no ratio to give
        return (
            what,
            f"not measurable (sync stall {stall:.2f} s, async {slowdown:.2f} s{cpu})",
            rounds,
            "≤ 0.25",
            False,
        )
    measured = (
        f"{slowdown / stall:.2f} ({slowdown:.2f} vs {stall:.2f} s; blocked "
        f"{asynchronous['blocked_s']:.3f} s{cpu})"
    )
    return what, measured, rounds, "≤ 0.25", slowdown / stall <= 0.25


def spread(name: str, values: list[float], unit: str) -> str:
    return f"{name} {min(values):,.0f}-{max(values):,.0f} {unit}"


def loop_rows() -> list[tuple[str, str, str, str, bool]]:
    """The README's loop against raw DDP, per number of ranks. The 2% target holds where each
    rank has a core; with more ranks than cores, two identical loops differ by more than 2%
    (raw again / raw), and the row shows the ratio and its interval without a target."""
    result = load("loop_overhead")
    cores = result.get("cores", os.cpu_count() or 1)
    rows = []
    for size, by_size in result["by_world_size"].items():
        times = by_size["step_time_s"]
        ratio = by_size["ratio_to_raw"]["readme"]
        low, high = by_size["ratio_interval_90"]["readme"]
        same = by_size["ratio_to_raw"]["raw again"]
        same_low, same_high = by_size["ratio_interval_90"]["raw again"]
        own_core = int(size) <= cores
        rows.append(
            (
                f"step time, the README's loop / raw DDP, {size} ranks on {cores} cores",
                f"{ratio:.3f} (90% interval {low:.3f}-{high:.3f}; "
                f"{times['readme']['kept'] * 1e3:.2f} vs {times['raw']['kept'] * 1e3:.2f} ms); "
                f"raw again / raw {same:.3f} "
                f"({same_low:.3f}-{same_high:.3f}); CPU time per step "
                f"{by_size['cpu_ratio_to_raw']['readme']:.3f}",
                f"raw {times['raw']['min'] * 1e3:.1f}-{times['raw']['max'] * 1e3:.1f} ms per round",
                "≤ 1.02" if own_core else "-",
                ratio <= 1.02,
            )
        )
    return rows


def machinery_rows() -> list[tuple[str, str, str, str, bool]]:
    """What the README loop's own calls cost per step at each number of ranks (older result
    files have no such measurement)."""
    by_size = load("loop_overhead")["by_world_size"]
    costs = {
        size: result["machinery_cpu_us_per_step"]
        for size, result in by_size.items()
        if "machinery_cpu_us_per_step" in result
    }
    if not costs:
        return []
    medians = [cost["median"] for cost in costs.values()]
    return [
        (
            "CPU per step of the README loop's own calls (no model), " + "/".join(costs) + " ranks",
            " / ".join(f"{cost['median']:.1f} µs" for cost in costs.values()),
            ", ".join(f"{cost['min']:.1f}-{cost['max']:.1f}" for cost in costs.values()),
            f"flat: the largest ≤ the smallest + {FLAT_US:g} µs",
            max(medians) <= min(medians) + FLAT_US,
        )
    ]


def strategy_rows() -> list[tuple[str, str, str, str, bool]]:
    """The strategies' wrapper overhead against the same model wrapped by hand, and their
    peak memory per rank, per number of ranks."""
    result = load("strategies")
    rows = []
    for size, by_size in result["world_sizes"].items():
        times = by_size["step_time_s"]
        same = by_size.get("same_step_twice")  # older result files have none
        for ratio_name, ratio in by_size["wrapper_overhead"].items():
            ours, raw = ratio_name.split(" / ")
            rows.append(
                (
                    f"step time, st.wrap {ours} / {raw} by hand, {size} ranks",
                    f"{ratio:.3f} ({times[ours]['median'] * 1e3:,.0f} vs "
                    f"{times[raw]['median'] * 1e3:,.0f} ms)"
                    + (f"; raw_ddp again / raw_ddp {same:.3f}" if same is not None else ""),
                    f"{ours} {times[ours]['min'] * 1e3:,.0f}-{times[ours]['max'] * 1e3:,.0f} ms",
                    "≤ 1.02",
                    ratio <= 1.02,
                )
            )
        memory = ", ".join(
            f"{name} {max(peaks):.2f}" for name, peaks in by_size["peak_memory_gb_per_rank"].items()
        )
        rows.append((f"peak memory per rank (GB), {size} ranks", memory, "-", "-", True))
    return rows


def observe_rows() -> list[tuple[str, str, str, str, bool]]:
    """The monitor's sampler against no sampler; scaletrain analyze against HTA."""
    monitor = load("monitor_overhead")
    ratio = monitor["ratio_to_no_sampler"]["every 2 s"]
    share = monitor["sampler_share_of_one_core"]["every 2 s"]["median"]
    times = monitor["step_time_s"]
    hta = load("analyze_vs_hta")
    seconds, memory = hta["seconds"], hta["peak_rss_mb"]
    return [
        ("step time with the monitor's sampler (every 2 s) / without",
         f"{ratio:.3f} (the sampler uses {share:.2%} of a core)",
         f"without {times['no sampler']['min'] * 1e3:.1f}-"
         f"{times['no sampler']['max'] * 1e3:.1f} ms", "no measurable slowdown",
         ratio <= 1.02),
        (f"scaletrain analyze vs HTA, {hta['trace_mb_total']:.0f} MB of traces: time",
         f"{seconds['scaletrain']['median']:.1f} vs {seconds['hta']['median']:.1f} s "
         f"({hta['speedup']:.1f}× faster)", "-", "faster", hta["speedup"] > 1),
        ("… peak memory",
         f"{memory['scaletrain']['median']:.0f} vs {memory['hta']['median']:.0f} MB "
         f"({hta['memory_ratio']:.2f})", "-", "less", hta["memory_ratio"] < 1),
        ("… the breakdown's numbers equal HTA's", "yes" if hta["numbers_agree"] else "no",
         "-", "within the stated tolerance", hta["numbers_agree"]),
    ]  # fmt: skip


def heartbeat_rows() -> list[tuple[str, str, str, str, bool]]:
    """The README's loop with the hang watchdog on (default limit) against off."""
    result = load("heartbeat_overhead")
    times, on = result["step_time_s"], "on (limit 300 s)"
    ratio = result["ratio_to_off"][on]
    return [
        (
            "step time, hang watchdog on / off (`scaletrain run`, launches)",
            f"{ratio:.3f} ({times[on]['median'] * 1e3:.2f} vs "
            f"{times['off']['median'] * 1e3:.2f} ms)",
            f"off {times['off']['min'] * 1e3:.2f}-{times['off']['max'] * 1e3:.2f} ms",
            "≤ 1.01",
            ratio <= 1.01,
        ),
        (
            "what the loop pays the watchdog per call (`note_step`, twice a step)",
            f"{result['note_step_us'][on]:.2f} µs",
            "-",
            "-",
            True,
        ),
    ]


def render_summary() -> str:
    """summary.md from the saved results: the one place the figures are written."""
    about = load("machine")
    lines = [
        "# Benchmark results",
        "",
        "Written by `bash benchmarks/run.sh` (benchmarks/run_all.py) from the JSON files",
        "beside this one; do not edit by hand. Each figure is the median of repeated,",
        "interleaved rounds; the spread is the range over those rounds. 2 ranks, gloo, CPU",
        "unless a row says otherwise.",
        "",
        f"Machine: {about['cpu']}, {about['cores']} cores, {about['memory_gb']} GB, "
        f"Python {about['python']}; "
        + ", ".join(f"{name} {number}" for name, number in about["versions"].items())
        + ".",
        f"Measured {about['time']}; load average (1, 5, 15 min) when it started: "
        + ", ".join(f"{load:g}" for load in about["load_average_1_5_15_min"])
        + f" on {about['cores']} cores. A load above the core count means other work shared "
        "the machine: treat differences within the spread as noise.",
        "Load average (1 min) at the start of each benchmark: "
        + ", ".join(
            f"{name} {value:g}"
            for name, value in about.get("load_average_1_min_at_start_of", {}).items()
        )
        + ".",
        "",
        "| what | measured | spread | target | met |",
        "|---|---|---|---|---|",
    ]
    every = rows() + loop_rows() + machinery_rows() + checkpoint_rows() + strategy_rows()
    every += observe_rows() + heartbeat_rows()
    for what, measured, spread_text, target, met in every:
        verdict = "yes" if met else "no"
        lines.append(f"| {what} | {measured} | {spread_text} | {target} | "
                     f"{verdict if target != '-' else '-'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--summary", action="store_true", help="only rewrite summary.md from the saved results"
    )
    parser.add_argument(
        "--skip", nargs="+", default=[], choices=sorted(RUNS), help="keep these saved results"
    )
    args = parser.parse_args()
    if not args.summary:
        console = Console(stderr=True)
        about = machine() | {"load_average_1_min_at_start_of": {}}
        if args.skip:  # kept results keep the load they were measured under
            about["load_average_1_min_at_start_of"] = {
                name: value
                for name, value in load("machine").get("load_average_1_min_at_start_of", {}).items()
                if name in args.skip
            }
        for name, command in RUNS.items():
            if name in args.skip:
                continue
            about["load_average_1_min_at_start_of"][name] = round(os.getloadavg()[0], 2)
            save("machine", about)
            started = time.perf_counter()
            console.print(f"[bold]{name}[/bold]: {' '.join(command[1:])}")
            subprocess.run(command, check=True, capture_output=True, timeout=3600)
            console.print(f"  done in {time.perf_counter() - started:.0f} s")
    SUMMARY.write_text(render_summary())
    print(SUMMARY.read_text(), end="")


if __name__ == "__main__":
    main()
