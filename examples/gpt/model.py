"""A GPT language model in the style of nanoGPT (Karpathy): token and position embeddings,
pre-norm transformer blocks in a ModuleList, a head that shares the token embedding.

Sizes run from a toy that trains in seconds on a laptop CPU to about 1 billion parameters;
with GPT-2's 50,257-token vocabulary "gpt2" is GPT-2 small (124 M parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    vocab_size: int
    block_size: int
    """Longest sequence (tokens) the position embedding covers."""
    layers: int
    heads: int
    width: int
    """d_model; heads × head size."""
    dropout: float = 0.0


# name -> (layers, heads, width)
SIZES = {
    "tiny": (2, 4, 64),  # ~0.1 M parameters: tests and laptops
    "small": (6, 6, 384),  # nanoGPT's Shakespeare model, ~11 M
    "gpt2": (12, 12, 768),  # 124 M with GPT-2's vocabulary
    "gpt2-medium": (24, 16, 1024),  # 350 M
    "gpt2-large": (36, 20, 1280),  # 774 M
    "1b": (24, 16, 2048),  # 1.3 B with GPT-2's vocabulary: FSDP/ZeRO-3 territory
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # (batch, heads, length, head size); flash/memory-efficient attention where available
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.width)
        self.attention = CausalSelfAttention(config)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(),
            nn.Linear(4 * config.width, config.width),
            nn.Dropout(config.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.width)
        self.positions = nn.Embedding(config.block_size, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.head.weight = self.tokens.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                # GPT-2: residual projections scaled by 1/sqrt(2 × layers)
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Parameters counted once (the head shares the token embedding)."""
        return sum(parameter.numel() for parameter in self.parameters())

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting `targets` (the next token at each position)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        # float32 for the softmax: 16-bit logits lose the small probabilities
        return nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
