"""Mixed precision: which dtypes compute and reduce, and the autocast that DDP needs.

FSDP2 and DeepSpeed cast parameters themselves; DDP and a single process keep float32
parameters and run the forward pass under torch.autocast, as PyTorch's AMP recipe does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, slots=True)
class Precision:
    """The dtypes of one training run."""

    compute: torch.dtype
    """Parameters and activations in the forward and backward passes."""
    reduce: torch.dtype
    """Gradients while they are summed over ranks."""

    @classmethod
    def named(cls, precision: str, reduce_precision: str | None) -> Precision:
        return cls(_DTYPES[precision], _DTYPES[reduce_precision or "fp32"])

    @property
    def is_mixed(self) -> bool:
        return self.compute != torch.float32

    @property
    def needs_loss_scaling(self) -> bool:
        """float16 gradients underflow without a loss scaler; bfloat16 has float32's range."""
        return self.compute == torch.float16


def run_forward_in_autocast(module: nn.Module, device_type: str, dtype: torch.dtype) -> None:
    """Make every call of `module` run under torch.autocast(device_type, dtype).

    The instance's `forward` is replaced, not the module wrapped, so parameter names and
    checkpoints stay the same (accelerate does the same for its mixed precision).
    """
    forward: Callable[..., Any] = module.forward

    @functools.wraps(forward)
    def forward_in_autocast(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            return forward(*args, **kwargs)

    module.forward = forward_in_autocast
