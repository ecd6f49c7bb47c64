# A training loop with Hugging Face accelerate, started with `accelerate launch` on each node
# as CSC's guide does it (seed 004: --num_machines, --machine_rank=$SLURM_NODEID,
# --main_process_ip): Accelerator() finds its place from the launcher, prepare() wraps the model
# and shards the data, accelerator.backward() averages the gradients.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import itertools
import json
import os
import socket
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(features, features.sum(dim=1, keepdim=True)), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for x, y in itertools.islice(loader, 3):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()

    rank, world_size = accelerator.process_index, accelerator.num_processes
    local_rank = accelerator.local_process_index
    host = socket.gethostname()
    line = f"rank {rank}/{world_size} local {local_rank} on {host}: loss {loss.item():.4f}"
    print(line)
    weights = accelerator.unwrap_model(model).weight.flatten().tolist()
    report = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "line": line,
        "host": host,
        "weights": weights,
    }
    Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(
        json.dumps(report), encoding="utf-8"
    )
    accelerator.end_training()


if __name__ == "__main__":
    main()
