# Written for a start script that shows each task only its own GPU, as seed 003's does
# (RANK=$SLURM_PROCID, WORLD_SIZE=$SLURM_NPROCS, MASTER_ADDR, and
# HIP_VISIBLE_DEVICES=$SLURM_LOCALID before `python -u ./myapp`; LUMI's select_gpu wrapper sets
# ROCR_VISIBLE_DEVICES the same way): the script never asks which GPU is its own, it takes the
# one it sees with .cuda(). Started by srun, one task per GPU.
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
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

model = torch.nn.Linear(4, 1)
if torch.cuda.is_available():
    model = model.cuda()
model = DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))

for x, y in itertools.islice(loader, 3):
    if torch.cuda.is_available():
        x, y = x.cuda(), y.cuda()
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()

line = f"rank {rank}/{world_size} on {socket.gethostname()}: loss {loss.item():.4f}"
print(line)
report = {
    "rank": rank,
    "world_size": world_size,
    "line": line,
    "host": socket.gethostname(),
    "weights": model.module.weight.flatten().tolist(),
}
Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(json.dumps(report), encoding="utf-8")
dist.barrier()
dist.destroy_process_group()
