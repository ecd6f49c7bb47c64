"""Benchmark: `scaletrain analyze` against Holistic Trace Analysis on the same traces.

    python benchmarks/analyze_vs_hta.py [--steps 100] [--kernels 400] [--rounds 3]

Writes 2 ranks' GPU traces in Kineto's format (tests/support/kineto_traces.py; no GPU here),
then, in alternating rounds, runs each tool in a fresh process on them: HTA's
get_temporal_breakdown and get_comm_comp_overlap, and scaletrain's analyze_traces. Compared:
each rank's idle, compute, non-compute and kernel time and the overlap ratio (equal within
TOLERANCE), wall time and peak memory (the process and its children: HTA parses ranks in a
process pool). Times are whole microseconds, where HTA's rounding of times to microseconds
changes nothing; a second, smaller set with Kineto's nanosecond times shows what that
rounding does to HTA's numbers. Result: benchmarks/results/analyze_vs_hta.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from tests.support.kineto_traces import CUDA, ROCM, training_trace  # noqa: E402

from common import save, spread  # noqa: E402

# Allowed differences: times relative (float sums in another order); the overlap ratio
# absolute, because HTA returns it as a percentage rounded to 0.01.
TOLERANCE = {"times_relative": 1e-6, "overlap_ratio_absolute": 5e-5}
TIMES = ("idle_us", "compute_us", "non_compute_us", "span_us")


def _peak_rss_mb() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss, not inherited from
    the parent across fork and exec) or of its largest child (HTA's parser pool)."""
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    own = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # KiB


def worker_hta(folder: Path) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    started = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(folder))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    elapsed = time.perf_counter() - started
    ranks = {}
    for row in temporal.itertuples():
        percent = overlap.loc[overlap["rank"] == row.rank, "comp_comm_overlap_pctg"].iloc[0]
        ranks[str(row.rank)] = {
            "idle_us": float(row[2]),
            "compute_us": float(row[3]),
            "non_compute_us": float(row[4]),
            "span_us": float(row[5]),
            "overlap_ratio": float(percent) / 100,
        }
    return {"seconds": elapsed, "peak_rss_mb": _peak_rss_mb(), "ranks": ranks}


def worker_scaletrain(folder: Path) -> dict[str, Any]:
    from scaletrain.observe.analysis.analyze import analyze_traces

    started = time.perf_counter()
    analysis = analyze_traces(folder)
    elapsed = time.perf_counter() - started
    ranks = {
        str(b.rank): {
            "idle_us": b.idle_us,
            "compute_us": b.compute_us,
            "non_compute_us": b.non_compute_us,
            "span_us": b.span_us,
            "overlap_ratio": b.overlap_ratio,
        }
        for b in analysis.breakdowns
    }
    return {"seconds": elapsed, "peak_rss_mb": _peak_rss_mb(), "ranks": ranks}


WORKERS = {"hta": worker_hta, "scaletrain": worker_scaletrain}


def run_worker(tool: str, folder: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", tool, str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=3600)
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def write_traces(folder: Path, steps: int, kernels: int, whole_us: bool) -> float:
    """Two ranks (rank 1 a straggler), one CUDA and one ROCm, written by another process
    (so that this one, whose memory the workers start from, stays small); the size in MB."""
    command = [sys.executable, __file__, "--write", str(folder), "--steps", str(steps),
               "--kernels", str(kernels), *(["--whole-us"] if whole_us else [])]  # fmt: skip
    subprocess.run(command, check=True, timeout=3600)
    return sum(path.stat().st_size for path in folder.iterdir()) / 1e6


def write_traces_here(folder: Path, steps: int, kernels: int, whole_us: bool) -> None:
    for rank, vendor in ((0, CUDA), (1, ROCM)):
        trace = training_trace(
            vendor, rank, 2, steps=steps, kernels_per_step=kernels,
            late_us=300.0 * rank, whole_us=whole_us,
        )  # fmt: skip
        trace.write(folder / f"rank-{rank}.pt.trace.json")


def differences(hta: dict[str, Any], ours: dict[str, Any]) -> dict[str, float]:
    """Largest difference per field over ranks: relative for times, absolute for overlap."""
    worst = {}
    for field in (*TIMES, "overlap_ratio"):
        worst[field] = max(
            abs(ours["ranks"][rank][field] - hta["ranks"][rank][field])
            / (max(abs(hta["ranks"][rank][field]), 1e-12) if field in TIMES else 1.0)
            for rank in hta["ranks"]
        )
    return worst


def agree(worst: dict[str, float]) -> bool:
    times = all(worst[field] <= TOLERANCE["times_relative"] for field in TIMES)
    return times and worst["overlap_ratio"] <= TOLERANCE["overlap_ratio_absolute"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--write", type=Path, help="only write the traces into this folder")
    parser.add_argument("--whole-us", action="store_true")
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--kernels", type=int, default=400, help="compute kernels per step")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    if options.worker:
        print(json.dumps(WORKERS[options.worker](options.folder)))
        return
    if options.write:
        write_traces_here(options.write, options.steps, options.kernels, options.whole_us)
        return
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "whole-us"
        megabytes = write_traces(folder, options.steps, options.kernels, whole_us=True)
        runs: dict[str, list[dict[str, Any]]] = {"hta": [], "scaletrain": []}
        for _ in range(options.rounds):
            for tool in ("hta", "scaletrain"):  # interleaved: drift hits both alike
                runs[tool].append(run_worker(tool, folder))
        nanosecond = Path(temporary) / "ns"
        write_traces(nanosecond, max(options.steps // 10, 3), options.kernels, whole_us=False)
        rounding = differences(run_worker("hta", nanosecond), run_worker("scaletrain", nanosecond))
    worst = differences(runs["hta"][0], runs["scaletrain"][0])
    seconds = {tool: spread([run["seconds"] for run in found]) for tool, found in runs.items()}
    memory = {tool: spread([run["peak_rss_mb"] for run in found]) for tool, found in runs.items()}
    record = {
        "what": "scaletrain analyze vs Holistic Trace Analysis 0.5.0, same 2 GPU traces",
        "trace_mb_total": round(megabytes, 1),
        "steps": options.steps,
        "compute_kernels_per_step": options.kernels,
        "tolerance": TOLERANCE,
        "largest_relative_difference": worst,
        "numbers_agree": agree(worst),
        "ns_traces_largest_relative_difference_from_hta_rounding": rounding,
        "seconds": seconds,
        "peak_rss_mb": memory,
        "speedup": seconds["hta"]["median"] / seconds["scaletrain"]["median"],
        "memory_ratio": memory["scaletrain"]["median"] / memory["hta"]["median"],
        "hta": runs["hta"][0]["ranks"],
        "scaletrain": runs["scaletrain"][0]["ranks"],
    }
    path = save("analyze_vs_hta", record)
    print(json.dumps({key: record[key] for key in (
        "trace_mb_total", "numbers_agree", "largest_relative_difference", "speedup",
        "memory_ratio", "seconds", "peak_rss_mb")}, indent=2))  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
