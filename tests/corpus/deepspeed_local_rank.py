# DeepSpeed as CSC writes it (seed 004, CSC's pytorch-ddp-examples mnist_deepspeed.py): the
# parser takes --local_rank, which DeepSpeed's launcher passes, and DeepSpeed's own
# --deepspeed --deepspeed_config (deepspeed.add_config_arguments); deepspeed.initialize makes
# the data loader; each batch goes to model_engine.local_rank. On several nodes CSC starts it
# with srun, one task per GPU: `srun python3 myprog.py --deepspeed --deepspeed_config ...`.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import argparse
import itertools
import json
import os
import socket
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--local_rank", type=int, default=-1, help="local rank passed from distributed launcher"
    )
    parser.add_argument("--steps", type=int, default=3)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    model = torch.nn.Linear(4, 1)
    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    train_dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
    model_engine, _, train_loader, __ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=train_dataset
    )
    device = model_engine.local_rank if torch.cuda.is_available() else "cpu"

    for batch in itertools.islice(train_loader, args.steps):
        data = batch[0].to(device)
        labels = batch[1].to(device)
        outputs = model_engine(data)
        loss = torch.nn.functional.mse_loss(outputs, labels)
        model_engine.backward(loss)
        model_engine.step()

    line = (
        f"rank {rank}/{world_size} local {model_engine.local_rank} on {socket.gethostname()}"
        f" (--local_rank={args.local_rank}): loss {loss.item():.4f}"
    )
    print(line)
    report = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": model_engine.local_rank,
        "local_rank_argument": args.local_rank,
        "line": line,
        "host": socket.gethostname(),
        "weights": model.weight.flatten().tolist(),
    }
    Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(
        json.dumps(report), encoding="utf-8"
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
