"""Two training steps of a 17-million-parameter stack of blocks under one strategy; rank 0
writes every rank's peak memory as Progress's summary records it (peak_memory_gb)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn

import scaletrain as st

WIDTH, BLOCKS = 512, 8  # 8 × (512·2048 + 2048·512) weights ≈ 16.8 M parameters, 67 MB


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = st.init()
    st.seed_everything(0)
    model = nn.Sequential(
        nn.ModuleList(
            nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
            for _ in range(BLOCKS)
        )
    )
    blocks = model[0]
    model.forward = lambda x: [x := block(x) for block in blocks][-1]  # type: ignore[method-assign]
    training = st.wrap(model, torch.optim.AdamW(model.parameters()), strategy=args.strategy)
    progress = st.Progress(2, samples_per_step=4 * env.world_size)
    for _ in range(2):
        loss = training.model(torch.randn(4, WIDTH)).pow(2).mean()
        training.backward(loss)
        training.step()
        progress.update(loss=loss)
    summary = progress.finish()
    if env.is_main:
        args.out.write_text(json.dumps(summary))
    st.shutdown()


if __name__ == "__main__":
    main()
