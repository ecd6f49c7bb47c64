"""A plain PyTorch DDP script (no scaletrain in it) for the scaling study tests: a small MLP
on random data, as many steps as it is allowed; `--batch-size` is the global batch."""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--max-steps", type=int, default=10_000)
arguments = parser.parse_args()

dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(rank)
per_rank = arguments.batch_size // world
for _ in range(arguments.max_steps):
    inputs = torch.randn(per_rank, 128, generator=generator)
    targets = torch.randint(0, 10, (per_rank,), generator=generator)
    loss = nn.functional.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"rank {rank} of {world} on {os.uname().nodename}: done", flush=True)
dist.destroy_process_group()
