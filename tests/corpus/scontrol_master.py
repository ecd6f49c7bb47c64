# Seed 003's start script done in the script itself: MASTER_ADDR is the first node of the job
# (`scontrol show hostname "$SLURM_NODELIST" | head -n1`), MASTER_PORT a fixed 29500, RANK and
# WORLD_SIZE from SLURM_PROCID and SLURM_NPROCS, and HIP_VISIBLE_DEVICES=$SLURM_LOCALID, so
# that the task's own GPU is cuda:0. Started by srun, one task per GPU.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import itertools
import json
import os
import socket
import subprocess
from pathlib import Path

nodes = subprocess.run(
    ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
    capture_output=True,
    text=True,
    check=True,
).stdout.split()
os.environ["MASTER_ADDR"] = nodes[0]
os.environ["MASTER_PORT"] = "29500"
os.environ["RANK"] = os.environ["SLURM_PROCID"]
os.environ["WORLD_SIZE"] = os.environ["SLURM_NPROCS"]
os.environ["HIP_VISIBLE_DEVICES"] = os.environ["SLURM_LOCALID"]

import torch  # noqa: E402  (after HIP_VISIBLE_DEVICES, as the start script sets it first)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

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

master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
line = (
    f"rank {rank}/{world_size} on {socket.gethostname()}, master {master}: loss {loss.item():.4f}"
)
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
