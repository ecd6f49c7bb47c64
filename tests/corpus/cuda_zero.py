# A one-GPU script made data-parallel without asking which GPU is its own: it uses
# "cuda:0", the first GPU it sees, as a script does that was written for one visible GPU per
# task (seed 003 asks of every app whether it expects its GPU visibility set from outside).
# torch's env:// variables give it its rank. Started by srun, one task per GPU.
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

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

model = torch.nn.Linear(4, 1).to(device)
model = DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))

for x, y in itertools.islice(loader, 3):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()

line = f"rank {rank}/{world_size} on {socket.gethostname()} ({device}): loss {loss.item():.4f}"
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
