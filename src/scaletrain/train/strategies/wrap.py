"""`scaletrain.wrap`: one call for every data-parallel strategy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.process_group import current_env
from scaletrain.train.strategies import ddp, fsdp
from scaletrain.train.strategies.blocks import checkpoint_activations, find_blocks
from scaletrain.train.strategies.options import (
    DEEPSPEED,
    SHARDED,
    BlockSpec,
    WrapOptions,
    check_environment,
)
from scaletrain.train.strategies.precision import Precision
from scaletrain.train.strategies.training import Wrapped, clip_local_gradients


@overload
def wrap(model: nn.Module, optimizer: None = None, **options: Any) -> nn.Module: ...


@overload
def wrap(model: nn.Module, optimizer: Optimizer, **options: Any) -> Wrapped: ...


def wrap(
    model: nn.Module,
    optimizer: Optimizer | None = None,
    *,
    strategy: str = "ddp",
    precision: str = "fp32",
    reduce_precision: str | None = None,
    blocks: BlockSpec | Sequence[BlockSpec] | None = None,
    activation_checkpointing: bool = False,
    reshard_after_forward: bool = True,
    shard_size: int | None = None,
    accumulation_steps: int = 1,
    max_grad_norm: float | None = None,
    deepspeed_config: str | Path | Mapping[str, Any] | None = None,
    sync_batchnorm_layers: bool = False,
    **ddp_options: Any,
) -> nn.Module | Wrapped:
    """Put `model` on this process's device and distribute it with `strategy`.

    Without an optimizer, returns the model (DDP, or sharded in place for FSDP/HSDP), as
    in `model = st.wrap(Net())`. With one, returns a `Wrapped` whose `model`, `optimizer`,
    `backward(loss)` and `step()` are the same calls for every strategy:

        training = st.wrap(GPT(config), torch.optim.AdamW(...), strategy="fsdp",
                           precision="bf16", activation_checkpointing=True)

    strategy: ddp, fsdp, hsdp, zero1, zero2, zero3, or deepspeed (with deepspeed_config).
    The other options are documented on `WrapOptions`; `ddp_options` go to
    DistributedDataParallel (e.g. find_unused_parameters=True).
    """
    options = WrapOptions(
        strategy=strategy,
        precision=precision,
        reduce_precision=reduce_precision,
        blocks=blocks,
        activation_checkpointing=activation_checkpointing,
        reshard_after_forward=reshard_after_forward,
        shard_size=shard_size,
        accumulation_steps=accumulation_steps,
        max_grad_norm=max_grad_norm,
        deepspeed_config=deepspeed_config,
        sync_batchnorm_layers=sync_batchnorm_layers,
    )
    env = current_env()
    check_environment(options, env, has_optimizer=optimizer is not None)
    if ddp_options and strategy != "ddp":
        raise ScaletrainError(
            f"{', '.join(ddp_options)} are options of DistributedDataParallel, not of "
            f"strategy {strategy!r}.",
            "remove them, or use strategy='ddp'.",
        )
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    if sync_batchnorm_layers:
        model = ddp.sync_batchnorm(model, env)
    units = find_blocks(model, blocks) if strategy in SHARDED or activation_checkpointing else []
    if activation_checkpointing:
        checkpoint_activations(units)
    mixed = Precision.named(precision, reduce_precision)
    if strategy in DEEPSPEED:
        from scaletrain.train.strategies.deepspeed import start_engine

        assert optimizer is not None  # check_environment
        return start_engine(model, optimizer, env, options, mixed)
    if strategy in SHARDED:
        model = fsdp.shard_model(model, units, env, options, mixed)
        if optimizer is not None:
            fsdp.rebind_optimizer(optimizer, names, model)
        gradient_sync, clip = fsdp.fsdp_gradient_sync(model, options), fsdp.clip_sharded_gradients
    else:
        model = ddp.wrap_ddp(model, env, mixed, ddp_options)
        gradient_sync, clip = ddp.ddp_gradient_sync(model), clip_local_gradients
    if optimizer is None:
        return model
    return Wrapped(
        model=model,
        optimizer=optimizer,
        strategy=strategy,
        accumulation_steps=accumulation_steps,
        max_grad_norm=max_grad_norm,
        scaler=_loss_scaler(mixed, strategy, env.device.type),
        gradient_sync=gradient_sync,
        clip=clip,
    )


def _loss_scaler(precision: Precision, strategy: str, device_type: str) -> Any:
    """A dynamic loss scaler for fp16; FSDP's agrees on skipped steps across shards."""
    if not precision.needs_loss_scaling:
        return None
    if strategy in SHARDED:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device_type)
    from torch.amp import GradScaler

    return GradScaler(device_type)


def unwrap(model: nn.Module | Wrapped) -> nn.Module:
    """Your own module inside whatever `wrap` returned (a sharded module stays sharded)."""
    if isinstance(model, Wrapped):
        model = model.model
    deepspeed_engine = type(model).__module__.startswith("deepspeed")
    if isinstance(model, DistributedDataParallel) or deepspeed_engine:
        inner: nn.Module = getattr(model, "module")  # noqa: B009  (typed as Any or a Tensor)
        return inner
    return model
