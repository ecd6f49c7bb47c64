# Seed 002's setup_slurm_distributed(): the script reads Slurm's own variables for its local
# and global rank (SLURM_LOCALID, SLURM_PROCID), WORLD_SIZE and MASTER_ADDR/PORT from its job
# script, and passes rank and world size to init_process_group itself. Started by srun, one
# task per GPU.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import itertools
import json
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (as seed 002 writes it)
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup_slurm_distributed():
    """Initialize distributed training for SLURM environment"""
    local_rank = int(os.environ["SLURM_LOCALID"])
    global_rank = int(os.environ["SLURM_PROCID"])
    world_size = int(os.environ["WORLD_SIZE"])

    dist.init_process_group(
        backend="nccl" if torch.cuda.is_available() else "gloo",
        init_method="env://",
        world_size=world_size,
        rank=global_rank,
    )
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)

    return local_rank, global_rank, world_size


def setup_data(batch_size, rank, world_size):
    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    trainset = TensorDataset(features, features.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)
    return DataLoader(trainset, batch_size=batch_size, shuffle=False, sampler=sampler)


local_rank, rank, world_size = setup_slurm_distributed()
device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for x, y in itertools.islice(setup_data(8, rank, world_size), 3):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()

line = (
    f"rank {rank}/{world_size} local {local_rank} on {socket.gethostname()}: loss {loss.item():.4f}"
)
print(line)
report = {
    "rank": rank,
    "world_size": world_size,
    "local_rank": local_rank,
    "line": line,
    "host": socket.gethostname(),
    "weights": model.module.weight.flatten().tolist(),
}
Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(json.dumps(report), encoding="utf-8")
dist.barrier()
dist.destroy_process_group()
