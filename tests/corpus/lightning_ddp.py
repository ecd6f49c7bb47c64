# PyTorch Lightning with DDP as CSC's guide writes it (seed 004): the number of GPUs per node
# and of nodes come as --gpus and --nodes and go to the Trainer; Lightning finds its ranks
# through its own Slurm detection. CSC starts it with `srun python3 myprog.py --gpus=4
# --nodes=2`, one task per GPU.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import argparse
import json
import os
import socket
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.last_loss = loss.item()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", default=1, type=int, help="number of GPUs per node")
    parser.add_argument("--nodes", default=1, type=int, help="number of nodes")
    args = parser.parse_args()

    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    train_loader = DataLoader(
        TensorDataset(features, features.sum(dim=1, keepdim=True)), batch_size=8
    )
    model = Regression()
    trainer = pl.Trainer(
        devices=args.gpus,
        num_nodes=args.nodes,
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        strategy="ddp",
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_loader)

    rank, world_size, local_rank = trainer.global_rank, trainer.world_size, trainer.local_rank
    host = socket.gethostname()
    line = f"rank {rank}/{world_size} local {local_rank} on {host}: loss {model.last_loss:.4f}"
    print(line)
    report = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "line": line,
        "host": host,
        "weights": model.layer.weight.flatten().tolist(),
    }
    Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(
        json.dumps(report), encoding="utf-8"
    )
    # On gloo a process that exits with its group still open aborts now and then.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
