"""DistributedDataParallel: every rank holds the whole model; gradients are all-reduced."""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from scaletrain.runtime.layout import DistEnv
from scaletrain.train.strategies.precision import Precision, run_forward_in_autocast
from scaletrain.train.strategies.training import GradientSync, no_gradient_sync

# PyTorch's SyncBatchNorm runs only on these device types.
_SYNC_BATCHNORM_DEVICES = ("cuda", "xpu")


def sync_batchnorm(model: nn.Module, env: DistEnv) -> nn.Module:
    """BatchNorm layers that average their statistics over all ranks (on GPUs).

    On the CPU PyTorch has no SyncBatchNorm, so the model is returned unchanged with a
    warning: the same script then still runs on a laptop and syncs on the cluster.
    """
    if env.device.type not in _SYNC_BATCHNORM_DEVICES:
        warnings.warn(
            f"SyncBatchNorm needs a GPU; on {env.device.type} each rank keeps its own "
            "BatchNorm statistics.",
            stacklevel=4,
        )
        return model
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    return cast(nn.Module, converted)


def _compress_hook(dtype: torch.dtype) -> Any:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return (
        default_hooks.bf16_compress_hook
        if dtype == torch.bfloat16
        else default_hooks.fp16_compress_hook
    )


def wrap_ddp(
    model: nn.Module, env: DistEnv, precision: Precision, ddp_options: dict[str, Any]
) -> nn.Module:
    """The model on this rank's device, in DDP when there is more than one rank.

    With one process DDP would only add overhead, so the model stays unwrapped.
    """
    model = model.to(env.device)
    if env.world_size > 1:
        device_ids = [env.device.index] if env.device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids, **ddp_options)
        if precision.reduce != torch.float32:
            model.register_comm_hook(None, _compress_hook(precision.reduce))
    if precision.is_mixed:
        run_forward_in_autocast(model, env.device.type, precision.compute)
    return model


def ddp_gradient_sync(model: nn.Module) -> GradientSync:
    """Skip DDP's all-reduce on accumulation micro-steps: what `no_sync()` sets, as a switch."""
    if not isinstance(model, DistributedDataParallel):
        return no_gradient_sync

    def set_sync(enabled: bool) -> None:
        model.require_backward_grad_sync = enabled

    return set_sync
