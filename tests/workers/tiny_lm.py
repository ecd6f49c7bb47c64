"""A tiny transformer-shaped language model (blocks in a ModuleList) and learnable data,
shared by the strategy workers."""

from __future__ import annotations

import torch
from torch import nn

VOCAB, WIDTH, LENGTH, BLOCKS, GLOBAL_BATCH = 32, 16, 8, 3, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x).float()
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def sequences(count: int, *, seed: int) -> torch.Tensor:
    """Learnable sequences of LENGTH + 1 tokens: each follows from the previous one
    (t -> 3t + 1 mod VOCAB), from random first tokens."""
    generator = torch.Generator().manual_seed(seed)
    tokens = [torch.randint(0, VOCAB, (count,), generator=generator)]
    for _ in range(LENGTH):
        tokens.append((3 * tokens[-1] + 1) % VOCAB)
    return torch.stack(tokens, dim=1)


def rank_share(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's rows of a global batch: rank r of W takes rows r·B/W … (r+1)·B/W."""
    rows = len(batch) // world_size
    return batch[rank * rows : (rank + 1) * rows]
