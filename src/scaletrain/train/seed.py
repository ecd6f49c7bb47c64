"""Seed every random number generator a training script touches."""

from __future__ import annotations

import random

import torch

from scaletrain.runtime.process_group import current_env


def seed_everything(seed: int, *, per_rank: bool = False) -> int:
    """Seed Python, NumPy (when installed) and torch on all devices; return the seed used.

    The same seed on every rank gives identical initial weights; `per_rank=True` adds the
    rank so that, e.g., random augmentations differ between ranks.
    """
    if per_rank:
        seed += current_env().rank
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    return seed
