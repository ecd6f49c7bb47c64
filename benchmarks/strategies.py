"""Step time and peak memory per rank of every strategy on the GPT example, in one run.

    python benchmarks/strategies.py            # 2 and 4 ranks (gloo on CPU here), ~5 min
    python benchmarks/strategies.py --rounds 3 --steps-per-round 4   # a loaded machine

Against the same model wrapped by hand with plain PyTorch: `fully_shard` on every block and
the root (raw_fsdp), and DistributedDataParallel (raw_ddp). Step times come from one process
group per world size in which all variants are built and timed in interleaved rounds (drift
of a shared machine hits all alike; medians of the rounds). Peak memory per rank needs a
process per variant: on a GPU the allocator's peak, on the CPU the process's peak resident
set with glibc returning freed tensors at once (MALLOC_MMAP_THRESHOLD_), which includes
PyTorch's own ~1 GB.

Result: benchmarks/results/strategies.json (wrapper overhead: ratio fsdp / raw_fsdp).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples" / "gpt"))

WORLD_SIZES = (2, 4)
VARIANTS = ("raw_ddp", "ddp", "raw_fsdp", "fsdp", "hsdp", "zero2", "zero3")
# raw_ddp built a second time and timed like the others: two identical steps differ by this
# much in the same run (the noise floor of the wrapper overhead); no memory measurement.
SAME_AGAIN = "raw_ddp_again"
TIMED = (*VARIANTS, SAME_AGAIN)
# A GPT of 4 blocks, 256 wide, 128 tokens: 3.3 M parameters, ~0.1 s a step on one core.
LAYERS, HEADS, WIDTH, BLOCK, VOCAB, GLOBAL_BATCH = 4, 4, 256, 128, 256, 16
WARMUP_STEPS, MEMORY_STEPS = 3, 3

Step = Callable[[], None]


def build(variant: str) -> Step:
    """One training step of the GPT under `variant`, on this rank's share of a fixed batch."""
    import torch
    import torch.distributed as dist
    from model import GPT, GPTConfig

    import scaletrain as st

    env = st.current_env()
    st.seed_everything(0)
    config = GPTConfig(vocab_size=VOCAB, block_size=BLOCK, layers=LAYERS, heads=HEADS, width=WIDTH)
    model = GPT(config)
    rows = GLOBAL_BATCH // env.world_size
    tokens = torch.randint(0, VOCAB, (rows, BLOCK + 1), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1].to(env.device), tokens[:, 1:].to(env.device)
    if variant.startswith("raw_"):
        if variant == "raw_fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh(env.device.type, (dist.get_world_size(),))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            net: torch.nn.Module = model
        else:
            net = torch.nn.parallel.DistributedDataParallel(model.to(env.device))
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)

        def raw_step() -> None:
            net(inputs, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return raw_step
    options = {"hsdp": {"strategy": "hsdp", "shard_size": env.world_size // 2}}.get(
        variant, {"strategy": variant}
    )
    training = st.wrap(model, torch.optim.AdamW(model.parameters(), lr=1e-3), **options)

    def step() -> None:
        training.backward(training.model(inputs, targets))
        training.step()

    return step


def seconds_per_step(step: Step, steps: int) -> float:
    import torch.distributed as dist

    dist.barrier()  # every rank starts the round together
    started = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    return (time.perf_counter() - started) / steps


def time_all(out: Path, rounds_count: int, steps_per_round: int) -> None:
    """All variants in one process group, interleaved rounds; rank 0 writes the times."""
    import torch.distributed as dist

    import scaletrain as st

    st.init()
    steps = {variant: build(variant) for variant in TIMED}
    for step in steps.values():
        seconds_per_step(step, WARMUP_STEPS)
    rounds: dict[str, list[float]] = {variant: [] for variant in TIMED}
    for index in range(rounds_count):
        order = TIMED[index % len(TIMED) :] + TIMED[: index % len(TIMED)]
        for variant in order:
            rounds[variant].append(seconds_per_step(steps[variant], steps_per_round))
    if dist.get_rank() == 0:
        out.write_text(json.dumps(rounds), encoding="utf-8")
    st.shutdown()


def measure_memory(variant: str, out: Path) -> None:
    """One variant alone: a few steps, then every rank's peak memory."""
    import torch.distributed as dist

    import scaletrain as st
    from scaletrain.train.measures import peak_memory_per_rank

    env = st.init()
    step = build(variant)
    for _ in range(MEMORY_STEPS):
        step()
    peaks = peak_memory_per_rank(env.device)
    if dist.get_rank() == 0:
        out.write_text(json.dumps([round(peak / 1e9, 3) for peak in peaks]), encoding="utf-8")
    st.shutdown()


def launch(world_size: int, *args: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={world_size}", str(Path(__file__).resolve()), *args]  # fmt: skip
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    subprocess.run(command, check=True, env=environ, stdout=subprocess.DEVNULL)


def run_all(scratch: Path, rounds_count: int, steps_per_round: int) -> dict[str, object]:
    from common import save, spread

    results: dict[str, object] = {}
    for world_size in WORLD_SIZES:
        timing = scratch / f"time-{world_size}.json"
        launch(world_size, "--time", str(timing), "--rounds", str(rounds_count),
               "--steps-per-round", str(steps_per_round))  # fmt: skip
        rounds: dict[str, list[float]] = json.loads(timing.read_text())
        memory = {}
        for variant in VARIANTS:
            peaks = scratch / f"memory-{world_size}-{variant}.json"
            launch(world_size, "--memory", variant, str(peaks))
            memory[variant] = json.loads(peaks.read_text())
        medians = {variant: statistics.median(times) for variant, times in rounds.items()}
        results[str(world_size)] = {
            "step_time_s": {variant: spread(times) for variant, times in rounds.items()},
            "wrapper_overhead": {
                "fsdp / raw_fsdp": medians["fsdp"] / medians["raw_fsdp"],
                "ddp / raw_ddp": medians["ddp"] / medians["raw_ddp"],
            },
            "same_step_twice": medians[SAME_AGAIN] / medians["raw_ddp"],
            "peak_memory_gb_per_rank": memory,
        }
        print(f"{world_size} ranks: {json.dumps(results[str(world_size)]['wrapper_overhead'])}")
    record = {
        "benchmark": "strategies",
        "model": {
            "layers": LAYERS,
            "heads": HEADS,
            "width": WIDTH,
            "block_size": BLOCK,
            "vocab_size": VOCAB,
            "global_batch": GLOBAL_BATCH,
        },
        "rounds": rounds_count,
        "steps_per_round": steps_per_round,
        "load_average_at_end": os.getloadavg(),
        "world_sizes": results,
    }
    print(f"saved {save('strategies', record)}")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=Path, help="(one launch) time every variant")
    parser.add_argument("--memory", nargs=2, metavar=("VARIANT", "OUT"))
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds per variant")
    parser.add_argument("--steps-per-round", type=int, default=8)
    args = parser.parse_args()
    if args.time:
        time_all(args.time, args.rounds, args.steps_per_round)
    elif args.memory:
        measure_memory(args.memory[0], Path(args.memory[1]))
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            run_all(Path(scratch), args.rounds, args.steps_per_round)


if __name__ == "__main__":
    main()
