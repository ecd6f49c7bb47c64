"""A Hugging Face-style training script: transformers' GPT-2 and accelerate, no scaletrain.

Distribution comes from how it is launched: `accelerate launch --config_file fsdp_config.yaml`
(CSC's FSDP config, seed 004), or a job that `scaletrain submit --mode accelerate` writes.

    accelerate launch --config_file examples/accelerate_fsdp/fsdp_config.yaml \\
        --num_processes 2 --cpu examples/accelerate_fsdp/train_hf.py --text corpus.txt
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel


class ByteChunks(Dataset[torch.Tensor]):
    """A text file as UTF-8 bytes (tokens 0-255), cut into chunks of `length` tokens."""

    def __init__(self, path: Path, length: int) -> None:
        data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()
        self.chunks = data[: len(data) // length * length].view(-1, length)

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.chunks[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=Path, required=True, help="a UTF-8 text file")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()

    accelerator = Accelerator()
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=256, n_positions=args.length, n_embd=args.width, n_layer=args.layers, n_head=4
    )
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    chunks = ByteChunks(args.text, args.length)
    loader = DataLoader(chunks, batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.print(
        f"{accelerator.num_processes} processes, {accelerator.distributed_type}, "
        f"mixed precision {accelerator.mixed_precision}"
    )

    for epoch in range(args.epochs):
        total, count = torch.zeros((), device=accelerator.device), 0
        for tokens in loader:
            loss = model(input_ids=tokens, labels=tokens).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.detach()
            count += 1
        mean = accelerator.reduce(total / count, reduction="mean").item()
        accelerator.print(f"epoch {epoch}: loss {mean:.3f} (perplexity {math.exp(mean):.1f})")
    accelerator.end_training()


if __name__ == "__main__":
    main()
