"""A small Lightning model trained with DDP on CPU, as in CSC's Lightning example: the script
takes --devices (GPUs per node) and --nodes and passes them to the Trainer; Lightning finds
ranks through its own Slurm detection. Each rank writes <PROBE_DIR>/rank-<N>.json."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import lightning
import torch
from torch.utils.data import DataLoader, TensorDataset

import scaletrain as st


class Regression(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], _index: int) -> torch.Tensor:
        features, targets = batch
        return torch.nn.functional.mse_loss(self.layer(features), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, required=True, help="processes per node")
    parser.add_argument("--nodes", type=int, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)  # the same data and initial weights on every rank
    features = torch.randn(64, 4)
    data = TensorDataset(features, features.sum(dim=1, keepdim=True))
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.nodes,
        strategy="ddp",
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regression()
    trainer.fit(model, DataLoader(data, batch_size=8))
    report = {
        "rank": trainer.global_rank,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "world_size": trainer.world_size,
        "cluster_environment": type(trainer.strategy.cluster_environment).__name__,
        "host": socket.gethostname(),
        "steps": trainer.global_step,
        "weights": model.layer.weight.detach().flatten().tolist(),
    }
    folder = Path(os.environ["PROBE_DIR"])
    (folder / f"rank-{trainer.global_rank}.json").write_text(json.dumps(report))
    # Leave the gloo group cleanly: a process that exits with it open aborts now and then
    # ("terminate called without an active exception", pytorch/pytorch#179291).
    st.shutdown()


if __name__ == "__main__":
    main()
