# Plain PyTorch DDP as CSC teaches it (seeds 000 and 004, CSC's pytorch-ddp-examples
# mnist_ddp.py): init_process_group with env://, the GPU chosen by LOCAL_RANK with
# torch.cuda.set_device, DistributedSampler, DistributedDataParallel. CSC starts it with
# torchrun; seed 000 also starts it with srun, exporting RANK and LOCAL_RANK in each task.
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


def main():
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Linear(4, 1).to(device)
    model = DistributedDataParallel(
        model, device_ids=[local_rank] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))

    for x, y in itertools.islice(loader, 3):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()

    host = socket.gethostname()
    line = f"rank {rank}/{world_size} local {local_rank} on {host}: loss {loss.item():.4f}"
    print(line)
    report = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "line": line,
        "host": host,
        "weights": model.module.weight.flatten().tolist(),
    }
    Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(
        json.dumps(report), encoding="utf-8"
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
