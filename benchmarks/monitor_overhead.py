"""Benchmark: does the monitor's sampler slow training? The same DDP step loop with no
sampler, a sampler every 2 s (the default) and every 0.5 s, in alternating rounds.

    python benchmarks/monitor_overhead.py       # starts 2 ranks with torchrun itself

Rank 0 starts and stops the sampler (`scaletrain.observe.monitor.sampler`, as `scaletrain run` does)
between rounds; it finds both ranks by the run folder in their environment, so it does its
full work: GPU readings where there are GPUs, CPU and memory of every rank, TensorBoard
events. Result: benchmarks/results/monitor_overhead.json (median step time per variant and
its ratio to no sampler).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import save, spread  # noqa: E402

# rounds × variants × steps: the step loop of step_overhead.py (~20-30 ms per step here)
ROUNDS, STEPS_PER_ROUND, WARMUP_STEPS = 10, 60, 10
VARIANTS = {"no sampler": None, "every 2 s": 2.0, "every 0.5 s": 0.5}


def worker() -> None:
    import torch.distributed as dist

    from scaletrain.core.run_folder import RunFolder
    from scaletrain.launch.sampler_process import start_sampler, stop_sampler
    from step_overhead import raw_loop, timed

    dist.init_process_group("gloo")
    folder = RunFolder.from_environ(dict(os.environ))
    assert folder is not None
    loop = raw_loop()
    timed(loop, WARMUP_STEPS)
    medians: dict[str, list[float]] = {name: [] for name in VARIANTS}
    # The sampler's own CPU time per second of running: the share of one core it takes.
    cpu_share: dict[str, list[float]] = {name: [] for name in VARIANTS if VARIANTS[name]}
    names = list(VARIANTS)
    for round_ in range(ROUNDS):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            interval = VARIANTS[name]
            sampler = None
            if dist.get_rank() == 0 and interval is not None:
                sampler = start_sampler(folder, interval, dict(os.environ))
                time.sleep(interval)  # running, with its first sample taken
                before, started = _cpu_seconds(sampler.pid), time.perf_counter()
            medians[name].append(statistics.median(timed(loop, STEPS_PER_ROUND)))
            if sampler is not None:
                used = _cpu_seconds(sampler.pid) - before
                cpu_share[name].append(used / (time.perf_counter() - started))
                stop_sampler(sampler)
    if dist.get_rank() == 0:
        base = statistics.median(medians["no sampler"])
        samples = sum(1 for _ in folder.metrics.glob("monitor-*.jsonl"))
        record = {
            "benchmark": "monitor_overhead",
            "world_size": dist.get_world_size(),
            "rounds": ROUNDS,
            "steps_per_round": STEPS_PER_ROUND,
            "sample_files": samples,
            "step_time_s": {name: spread(values) for name, values in medians.items()},
            "sampler_share_of_one_core": {
                name: spread(values) for name, values in cpu_share.items()
            },
            "ratio_to_no_sampler": {
                name: statistics.median(values) / base for name, values in medians.items()
            },
        }
        print(f"saved {save('monitor_overhead', record)}", file=sys.stderr)
    dist.destroy_process_group()


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def main() -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        environ = {**os.environ, "SCALETRAIN_RUN_DIR": run_dir, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node=2", __file__, "--worker"]  # fmt: skip
        subprocess.run(command, env=environ, check=True, timeout=3600)


if __name__ == "__main__":
    worker() if "--worker" in sys.argv else main()
