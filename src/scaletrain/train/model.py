"""Put a model on this process's device and wrap it for data-parallel training."""

from __future__ import annotations

import warnings
from typing import Any, cast

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from scaletrain.runtime.layout import DistEnv
from scaletrain.runtime.process_group import current_env

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
            stacklevel=3,
        )
        return model
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    return cast(nn.Module, converted)


def wrap(model: nn.Module, *, sync_batchnorm_layers: bool = False, **ddp_options: Any) -> nn.Module:
    """Move `model` to this process's device and wrap it in DistributedDataParallel.

    With one process the model is returned unwrapped: DDP would only add overhead.
    `ddp_options` go to DistributedDataParallel (e.g. find_unused_parameters=True).
    """
    env = current_env()
    model = model.to(env.device)
    if sync_batchnorm_layers:
        model = sync_batchnorm(model, env)
    if env.world_size == 1:
        return model
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, **ddp_options)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's own module inside a DDP wrapper (or the module itself)."""
    return model.module if isinstance(model, DistributedDataParallel) else model
