"""Benchmark 1: step time of the same DDP training loop written four ways, in one run.

    torchrun --standalone --nproc-per-node=2 benchmarks/step_overhead.py

raw PyTorch (DDP + DistributedSampler), scaletrain (wrap, loader, Progress), Lightning
Fabric and accelerate train the same MLP on the same data with gloo on CPU. Each variant
reports the loss averaged over ranks every EVERY steps, as a real loop would. Rounds
alternate the variants so that drift of the shared machine hits all of them alike; the
result is the median step time per variant and its ratio to raw PyTorch.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaletrain as st
from common import save, spread

# 2 ranks × 128 samples = global batch 256; 256 inputs → 1024 → 1024 → 10 classes
# (~20-30 ms per step on one core: long enough that timer noise does not dominate).
GLOBAL_BATCH, FEATURES, HIDDEN, CLASSES, SAMPLES = 256, 256, 1024, 10, 256 * 40
ROUNDS, WARMUP_STEPS, STEPS_PER_ROUND, EVERY = 12, 5, 30, 10

Step = Callable[[], Iterator[None]]


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    return TensorDataset(inputs, torch.randint(0, CLASSES, (SAMPLES,), generator=generator))


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )  # fmt: skip


def endless(loader: DataLoader) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    epoch = 0
    while True:
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def raw_loop() -> Iterator[None]:
    world = dist.get_world_size()
    net = nn.parallel.DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    sampler = DistributedSampler(data(), drop_last=True)
    batches = endless(DataLoader(data(), batch_size=GLOBAL_BATCH // world, sampler=sampler))
    for step in range(10**9):
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % EVERY == 0:
            reported = loss.detach().clone()
            dist.all_reduce(reported)
            if dist.get_rank() == 0:
                print(f"raw loss {reported.item() / world:.3f}", file=sys.stderr)
        yield


def scaletrain_loop() -> Iterator[None]:
    net = st.wrap(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    batches = endless(st.loader(data(), global_batch_size=GLOBAL_BATCH))
    progress = st.Progress(10**9, samples_per_step=GLOBAL_BATCH, every=EVERY)
    while True:
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        progress.update(loss=loss)
        yield


def fabric_loop() -> Iterator[None]:
    from lightning_fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy="ddp")
    fabric.launch()
    net = model()
    net, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(
        DataLoader(data(), batch_size=GLOBAL_BATCH // fabric.world_size, shuffle=True)
    )
    batches = endless(loader)
    for step in range(10**9):
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        fabric.backward(loss)
        optimizer.step()
        if step % EVERY == 0:
            fabric.print(f"fabric loss {fabric.all_reduce(loss.detach()).item():.3f}")
        yield


def accelerate_loop() -> Iterator[None]:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(
        data(), batch_size=GLOBAL_BATCH // accelerator.num_processes, shuffle=True, drop_last=True
    )
    net, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    batches = endless(loader)
    for step in range(10**9):
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()
        if step % EVERY == 0:
            mean = accelerator.reduce(loss.detach(), reduction="mean")
            accelerator.print(f"accelerate loss {mean.item():.3f}")
        yield


def timed(loop: Iterator[None], steps: int) -> list[float]:
    """Seconds per step; a barrier first so that ranks start each round together."""
    dist.barrier()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        next(loop)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    st.init()  # the process group every variant finds already initialized
    loops = {
        "raw": raw_loop(),
        "scaletrain": scaletrain_loop(),
        "fabric": fabric_loop(),
        "accelerate": accelerate_loop(),
    }
    for loop in loops.values():
        timed(loop, WARMUP_STEPS)
    medians: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for round_ in range(ROUNDS):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            step_times = timed(loops[name], STEPS_PER_ROUND)
            medians[name].append(statistics.median(step_times))
    # Every rank measured; report rank 0's view after checking that ranks agree in size.
    if dist.get_rank() == 0:
        raw = statistics.median(medians["raw"])
        record = {
            "benchmark": "step_overhead",
            "world_size": dist.get_world_size(),
            "backend": dist.get_backend(),
            "global_batch": GLOBAL_BATCH,
            "rounds": ROUNDS,
            "steps_per_round": STEPS_PER_ROUND,
            "step_time_s": {name: spread(values) for name, values in medians.items()},
            "ratio_to_raw": {
                name: statistics.median(values) / raw for name, values in medians.items()
            },
        }
        print(f"saved {save('step_overhead', record)}", file=sys.stderr)
    st.shutdown()


if __name__ == "__main__":
    main()
