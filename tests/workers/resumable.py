"""A small deterministic training run with checkpoints, for the fault tests.

Dropout (RNG), SGD with momentum (optimizer state), StepLR (scheduler) and a shuffled
loader (mid-epoch position) must all come back exactly for the final weights of an
interrupted run to equal those of an uninterrupted one.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain as st

FEATURES, CLASSES = 16, 4


def make_data(samples: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(samples, FEATURES, generator=generator, dtype=torch.float64)
    targets = (inputs[:, :CLASSES] * 2).argmax(dim=1)  # learnable: the loss falls
    return TensorDataset(inputs, targets)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--every-steps", type=int, default=None)
    parser.add_argument("--every-minutes", type=float, default=None)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--asynchronous", action="store_true")
    parser.add_argument("--no-checkpoints", action="store_true")
    parser.add_argument("--stop-check-seconds", type=float, default=0.2)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pace: sleep per step")
    parser.add_argument("--dump-start", action="store_true", help="save the resumed weights")
    parser.add_argument("--sleep-rank", type=int, help="this rank sleeps inside one step, once")
    parser.add_argument("--sleep-at-step", type=int, default=5)
    parser.add_argument("--sleep-seconds", type=float, default=600.0)
    parser.add_argument("--evaluation-seconds", type=float, default=0.0, help="after each epoch")
    parser.add_argument("--fail-at-step", type=int, help="every rank raises in this step")
    return parser.parse_args()


def sleep_inside_step(seconds: float, marker: Path) -> None:
    """A rank that stops taking part (a stuck read, a hung GPU): once per run folder, so that
    a resumed run goes on."""
    if not marker.exists():
        marker.touch()
        time.sleep(seconds)


def main() -> None:
    args = parse_args()
    env = st.init()
    st.seed_everything(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, args.width),
        nn.Tanh(),
        nn.Dropout(0.2),
        nn.Linear(args.width, CLASSES),
    ).double()
    model = st.wrap(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    loader = st.loader(
        make_data(args.samples), global_batch_size=args.global_batch, num_workers=args.workers
    )
    ckpt = st.Checkpointer(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        every_steps=args.every_steps,
        every_minutes=args.every_minutes,
        keep=args.keep,
        asynchronous=args.asynchronous,
        enabled=not args.no_checkpoints,
        stop_check_seconds=args.stop_check_seconds,
    )
    pids = args.out / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    (pids / f"rank-{env.rank}.pid").write_text(str(os.getpid()))
    if args.dump_start and env.is_main:
        torch.save(st.unwrap(model).state_dict(), args.out / "start-weights.pt")

    steps = args.epochs * len(loader)
    progress = st.Progress(steps, samples_per_step=args.global_batch, every=1, start_step=ckpt.step)
    for epoch in ckpt.epochs(args.epochs):
        for inputs, targets in ckpt.batches(loader):
            loss = nn.functional.cross_entropy(model(inputs), targets)
            if ckpt.step == args.fail_at_step:
                raise RuntimeError(f"deliberate error at step {args.fail_at_step}")
            if env.rank == args.sleep_rank and ckpt.step == args.sleep_at_step:
                sleep_inside_step(args.sleep_seconds, args.out / "slept")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            progress.update(epoch=epoch, loss=loss)
            time.sleep(args.step_seconds)
        time.sleep(args.evaluation_seconds)  # outside the loop, as an evaluation would be

    if env.is_main:
        torch.save(st.unwrap(model).state_dict(), args.out / "weights.pt")
    progress.finish()
    st.shutdown()


if __name__ == "__main__":
    main()
