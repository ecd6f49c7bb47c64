"""A data-parallel script as people write it for torchrun, never converted to scaletrain: env://
rendezvous, LOCAL_RANK from the environment, DistributedSampler, DDP. It also takes DeepSpeed's
--local_rank (-1 when no launcher passes it). Each rank prints one line and writes
$PROBE_DIR/rank-<N>.json, then waits --sleep seconds (a job that is seen RUNNING)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)  # what deepspeed's launcher passes
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")  # "nccl" on GPUs; env:// reads RANK, WORLD_SIZE, MASTER_*
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
data = TensorDataset(features, features.sum(dim=1, keepdim=True))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, seed=0))
losses = []
for _step, (x, y) in zip(range(args.steps), loader, strict=False):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(
    f"rank {rank}/{world_size} local {local_rank} on {socket.gethostname()}: loss {losses[-1]:.4f}"
)
report = {
    "rank": rank,
    "world_size": world_size,
    "local_rank": local_rank,
    "local_rank_argument": args.local_rank,
    "host": socket.gethostname(),
    "weights": model.module.weight.detach().flatten().tolist(),
}
(Path(os.environ["PROBE_DIR"]) / f"rank-{rank}.json").write_text(json.dumps(report))
time.sleep(args.sleep)
dist.barrier()
dist.destroy_process_group()
