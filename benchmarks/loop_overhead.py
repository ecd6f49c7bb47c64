"""Benchmark: the training loop exactly as the README teaches it, against the same loop in
raw PyTorch DDP, in one run; and how its per-step overhead grows with the number of ranks.

    python benchmarks/loop_overhead.py                  # 2, 4, 8 and 16 local ranks
    python benchmarks/loop_overhead.py --nproc 2 4      # some of them

For each size it starts `torchrun --standalone --nproc-per-node=N` on this file. Each rank
builds four loops over the same tiny MLP and data (a step of a few milliseconds, so that any
cost per step shows), then times the README loop's own calls around an empty step
(machinery_cpu_per_step):

- raw:       DDP + DistributedSampler; the loss all_reduced and printed every EVERY steps;
- raw again: the same raw loop built a second time: raw again / raw is how far two identical
             loops differ in this run (the noise floor the other ratios are read against);
- init+wrap: `st.init()`, `st.wrap`, `st.loader`, otherwise the raw loop;
- readme:    the README's loop: `st.Checkpointer` (`ckpt.epochs`/`ckpt.batches`, saving by
             default about once a minute here, a step that the median step time does not
             see) and `st.Progress` with `progress.update(loss=loss)` at every step.

Rounds of about two seconds alternate the loops, each round in a random order, so that drift
of the machine and what one loop leaves behind hit all alike; long enough that the README
loop votes about as often as alone (rank 0 spaces votes by its loop's pace in wall time,
which the other loops' rounds stretch; the result gives the steps per vote). The step time
of a loop is the mean of its fastest half of steps (rank 0's): the scheduler's delays and
the README loop's timed saves fall in the slower half. The ratio to raw comes with a 90%
interval from resampling the rounds (paired: the same rounds for both loops). Also the CPU
time per step (each process's threads, averaged over the ranks): with more ranks than cores,
wall time mostly measures the scheduler, and two identical loops differ by a few percent.
Results: benchmarks/results/loop_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import save, spread  # noqa: E402

# 2 ranks x 32 samples; 32 inputs -> 64 -> 10 classes: a step of a few ms on one core.
GLOBAL_BATCH_PER_RANK, FEATURES, HIDDEN, CLASSES, SAMPLES = 32, 32, 64, 10, 32 * 16 * 64
# Short rounds, many of them: drift of the machine then hits every loop alike.
# Rounds long enough that the README loop votes about as often as it would alone: rank 0
# spaces votes by the loop's pace in wall time, which the other loops' rounds stretch.
ROUNDS, ROUND_SECONDS, WARMUP_STEPS, EVERY = 12, 2.0, 50, 50
# The step time is the mean of the fastest KEPT_SHARE of steps; the interval of a ratio comes
# from RESAMPLES resamplings of the rounds.
KEPT_SHARE, RESAMPLES = 0.5, 1000
MACHINERY_STEPS, MACHINERY_ROUNDS = 20_000, 10
SIZES = (2, 4, 8, 16)
LOOPS = ("raw", "raw again", "init+wrap", "readme")


def run_size(nproc: int, round_seconds: float, rounds: int) -> dict[str, object]:
    """One torchrun launch of this file with `nproc` ranks; rank 0's measurements."""
    with tempfile.TemporaryDirectory(prefix="loop-overhead-") as folder:
        out = Path(folder) / "result.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(Path(__file__).resolve()),
            "--worker",
            f"--out={out}",
            f"--round-seconds={round_seconds}",
            f"--rounds={rounds}",
            f"--run-dir={Path(folder) / 'run'}",
        ]
        environ = {**os.environ, "OMP_NUM_THREADS": "1"}
        environ = {name: value for name, value in environ.items() if "SCALETRAIN" not in name}
        subprocess.run(command, check=True, env=environ, timeout=3600)
        result: dict[str, object] = json.loads(out.read_text())
        return result


def worker(out: Path, round_seconds: float, rounds: int, run_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    import scaletrain as st

    env = st.init()  # the group every loop finds already initialized
    world = env.world_size
    global_batch = GLOBAL_BATCH_PER_RANK * world

    def data() -> TensorDataset:
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
        return TensorDataset(inputs, torch.randint(0, CLASSES, (SAMPLES,), generator=generator))

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def step(net: nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> torch.Tensor:  # type: ignore[type-arg]
        inputs, targets = batch
        loss = nn.functional.cross_entropy(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    def report(step_number: int, loss: torch.Tensor) -> None:
        # What a raw loop does to print a loss: an all_reduce every EVERY steps, rank 0 prints.
        if step_number % EVERY == 0:
            reported = loss.detach().clone()
            dist.all_reduce(reported)
            if env.is_main:
                print(f"step {step_number} | loss {reported.item() / world:.4g}", flush=True)

    def raw_loop() -> Iterator[None]:
        net = nn.parallel.DistributedDataParallel(model())
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        sampler = DistributedSampler(data(), drop_last=True)
        loader = DataLoader(data(), batch_size=global_batch // world, sampler=sampler)
        number = 0
        for epoch in range(10**9):
            sampler.set_epoch(epoch)
            for batch in loader:
                number += 1
                report(number, step(net, optimizer, batch))
                yield

    def init_wrap_loop() -> Iterator[None]:
        net = st.wrap(model())
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        loader = st.loader(data(), global_batch_size=global_batch)
        number = 0
        for _ in range(10**9):
            for batch in loader:
                number += 1
                report(number, step(net, optimizer, batch))
                yield

    def readme_loop() -> Iterator[None]:
        net = st.wrap(model())
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        loader = st.loader(data(), global_batch_size=global_batch)
        ckpt = st.Checkpointer(model=net, optimizer=optimizer, run_dir=run_dir)
        count_votes(ckpt)
        progress = st.Progress(10**9, samples_per_step=global_batch, every=EVERY)
        for epoch in ckpt.epochs(10**9):
            for batch in ckpt.batches(loader):
                loss = step(net, optimizer, batch)
                progress.update(epoch=epoch, loss=loss)
                yield

    votes = {"votes": 0, "steps": 0}

    def count_votes(ckpt: st.Checkpointer) -> None:
        # Rank 0 spaces votes by the loop's pace in wall time, and here the other loops take
        # most of the wall time: the README loop votes more often than it would alone.
        start = ckpt._vote.start

        def counted(step: int, ballot: object) -> None:
            votes["votes"], votes["steps"] = votes["votes"] + 1, step
            start(step, ballot)  # type: ignore[arg-type]

        ckpt._vote.start = counted  # type: ignore[method-assign]

    def timed(loop: Iterator[None], count: int) -> tuple[list[float], float]:
        """Seconds of each of `count` steps, ranks starting together, and this process's CPU
        seconds per step (all its threads: gloo's, the vote's, a writer's)."""
        dist.barrier()
        times = []
        cpu_started = time.process_time()
        for _ in range(count):
            started = time.perf_counter()
            next(loop)
            times.append(time.perf_counter() - started)
        return times, (time.process_time() - cpu_started) / count

    loops = {
        "raw": raw_loop(),
        "raw again": raw_loop(),
        "init+wrap": init_wrap_loop(),
        "readme": readme_loop(),
    }
    for loop in loops.values():
        warmup, _ = timed(loop, WARMUP_STEPS)
    # Rank 0's step time decides the steps per round, the same on every rank.
    steps = [max(10, round(round_seconds / statistics.median(warmup)))]
    dist.broadcast_object_list(steps)
    step_times: dict[str, list[list[float]]] = {name: [] for name in loops}
    cpu: dict[str, list[float]] = {name: [] for name in loops}
    # Each round in its own random order (the same on every rank: one seed): with a fixed
    # cycle each loop always followed the same one, and what that one left behind (a warm
    # cache, a save's pages) fell on it alone.
    order = random.Random(1)
    for _ in range(rounds):
        for name in order.sample(list(loops), len(loops)):
            wall, cpu_per_step = timed(loops[name], steps[0])
            step_times[name].append(wall)
            cpu[name].append(cpu_per_step)
    cpu["machinery"] = machinery_cpu_per_step(run_dir / "machinery", global_batch)
    # Wall time under oversubscribed cores mostly measures the scheduler; CPU time per step,
    # averaged over the ranks, is what each loop costs.
    every_rank: list[dict[str, list[float]] | None] = [None] * world
    dist.all_gather_object(every_rank, cpu)
    if env.is_main:
        cpu_mean = {
            name: [
                statistics.fmean(rank[name][r] for rank in every_rank if rank)
                for r in range(len(values))
            ]
            for name, values in cpu.items()
        }
        measured = {"wall": step_times, "cpu": cpu_mean, "votes": votes, "steps": steps[0]}
        out.write_text(json.dumps(measured), encoding="utf-8")
    st.shutdown()


def machinery_cpu_per_step(run_dir: Path, global_batch: int) -> list[float]:
    """CPU seconds per step of the README loop's own calls around an empty step (the batch
    through `ckpt.batches`, `progress.update(loss=...)`, the votes) minus a bare loop over the
    same batches, one value per round: what the loop adds per step, without a model and
    DDP whose noise would hide a few microseconds. Progress reports are left out (every
    EVERY steps; the raw loop reports as often)."""
    import torch
    import torch.distributed as dist

    import scaletrain as st

    batches = [torch.zeros(1)] * MACHINERY_STEPS
    loss = torch.tensor(1.0)
    ckpt = st.Checkpointer(model=torch.nn.Linear(2, 2), run_dir=run_dir, every_minutes=None)
    progress = st.Progress(10**9, samples_per_step=global_batch, every=10**9)

    def bare() -> None:
        for _ in batches:
            pass

    def readme() -> None:
        for _ in ckpt.batches(batches):
            progress.update(loss=loss)

    def cpu_per_step(body: Callable[[], None]) -> float:
        dist.barrier()
        started = time.process_time()
        body()
        return (time.process_time() - started) / MACHINERY_STEPS

    return [cpu_per_step(readme) - cpu_per_step(bare) for _ in range(MACHINERY_ROUNDS)]


def step_time(rounds: list[list[float]]) -> float:
    """Seconds per step: the mean of the fastest KEPT_SHARE of the steps of these rounds."""
    fastest = sorted(time for steps in rounds for time in steps)
    return statistics.fmean(fastest[: max(1, round(len(fastest) * KEPT_SHARE))])


def ratio_interval(loop: list[list[float]], raw: list[list[float]]) -> tuple[float, float]:
    """90% interval of step_time(loop) / step_time(raw), resampling whole rounds (the same
    rounds of both loops, since they ran side by side)."""
    generator = random.Random(0)
    ratios = []
    for _ in range(RESAMPLES):
        picked = [generator.randrange(len(raw)) for _ in raw]
        ratios.append(step_time([loop[i] for i in picked]) / step_time([raw[i] for i in picked]))
    ratios.sort()
    return ratios[int(RESAMPLES * 0.05)], ratios[int(RESAMPLES * 0.95) - 1]


def summary(measured: dict[str, Any]) -> dict[str, object]:
    rounds, cpu = measured["wall"], dict(measured["cpu"])
    machinery = cpu.pop("machinery")
    kept = {name: step_time(values) for name, values in rounds.items()}
    raw_cpu = statistics.median(cpu["raw"])
    return {
        "step_time_s": {
            name: spread([step_time([steps]) for steps in values]) | {"kept": kept[name]}
            for name, values in rounds.items()
        },
        "ratio_to_raw": {name: kept[name] / kept["raw"] for name in kept},
        "ratio_interval_90": {
            name: ratio_interval(values, rounds["raw"]) for name, values in rounds.items()
        },
        "overhead_per_step_us": {name: (kept[name] - kept["raw"]) * 1e6 for name in kept},
        "cpu_per_step_s": {name: spread(values) for name, values in cpu.items()},
        "cpu_ratio_to_raw": {
            name: statistics.median(values) / raw_cpu for name, values in cpu.items()
        },
        "cpu_overhead_per_step_us": {
            name: (statistics.median(values) - raw_cpu) * 1e6 for name, values in cpu.items()
        },
        "machinery_cpu_us_per_step": spread([value * 1e6 for value in machinery]),
        "steps_per_round": measured["steps"],
        "readme_steps_per_vote": measured["votes"]["steps"] / max(1, measured["votes"]["votes"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=list(SIZES))
    parser.add_argument(
        "--round-seconds", type=float, default=ROUND_SECONDS, help="wall time of a round"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.out, options.round_seconds, options.rounds, options.run_dir)
        return
    by_size = {}
    for nproc in options.nproc:
        print(f"loop_overhead: {nproc} ranks ...", file=sys.stderr, flush=True)
        by_size[str(nproc)] = summary(run_size(nproc, options.round_seconds, options.rounds))
        shown = {
            key: by_size[str(nproc)][key]
            for key in (
                "ratio_to_raw",
                "ratio_interval_90",
                "cpu_ratio_to_raw",
                "machinery_cpu_us_per_step",
                "readme_steps_per_vote",
            )
        }
        print(json.dumps(shown), file=sys.stderr, flush=True)
    record = {
        "benchmark": "loop_overhead",
        "machine": f"{os.cpu_count()} cores, gloo on CPU, OMP_NUM_THREADS=1",
        "cores": os.cpu_count(),
        "rounds": options.rounds,
        "round_seconds": options.round_seconds,
        "step_time": f"mean of the fastest {KEPT_SHARE:.0%} of steps",
        "by_world_size": by_size,
    }
    print(f"saved {save('loop_overhead', record)}", file=sys.stderr)


if __name__ == "__main__":
    main()
