"""Train a small model for K steps and save the weights and the sample indices each rank saw.

Run with 1 and with 2 processes: DDP with global batch B must equal 1 process with batch B.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import scaletrain as st

SAMPLES, FEATURES, CLASSES = 100, 12, 3


def make_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, CLASSES, (SAMPLES,), generator=generator)
    return TensorDataset(inputs, targets, torch.arange(SAMPLES))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=8)
    args = parser.parse_args()

    env = st.init()
    st.seed_everything(0)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES)).double()
    model = st.wrap(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = st.loader(make_data(), global_batch_size=args.global_batch)

    seen: list[list[int]] = []
    for _epoch in range(args.epochs):  # no set_epoch: the loader must reshuffle by itself
        seen.append([])
        for inputs, targets, indices in loader:
            loss = nn.functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen[-1].extend(indices.tolist())

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"seen-rank{env.rank}.json").write_text(json.dumps(seen))
    if env.is_main:
        torch.save(st.unwrap(model).state_dict(), args.out / "weights.pt")
    st.shutdown()


if __name__ == "__main__":
    main()
