"""Tokens as nanoGPT keeps them: one flat file of uint16 token ids per split (train.bin,
val.bin) and meta.json with the vocabulary size. The dataset cuts non-overlapping blocks of
block_size + 1 tokens: the inputs, and the same shifted by one as the targets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset


def read_meta(data_dir: Path) -> dict[str, object]:
    path = data_dir / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found.\n"
            "HINT: tokenise your text into train.bin/val.bin with prepare_text.py, or pass "
            "--create-small-data for a small real stand-in."
        )
    meta: dict[str, object] = json.loads(path.read_text())
    return meta


class TokenBlocks(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Block i: tokens i·(T+1) … i·(T+1)+T as input, shifted by one as target."""

    def __init__(self, path: Path, block_size: int) -> None:
        # memmap: a corpus of billions of tokens is read from disk, not into memory
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.tokens) // (self.block_size + 1)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * (self.block_size + 1)
        block = torch.from_numpy(self.tokens[start : start + self.block_size + 1].astype(np.int64))
        return block[:-1], block[1:]
