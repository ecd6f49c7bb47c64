"""FSDP2 (`fully_shard`): shard each block and the rest of the model over a device mesh.

FSDP shards over all ranks; HSDP shards within groups (by default the processes of a node,
whose links are fast) and replicates across them, so that only gradient all-reduces cross
the slower network between nodes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.layout import DistEnv
from scaletrain.train.strategies.fsdp_averaging import average_gradients
from scaletrain.train.strategies.options import WrapOptions
from scaletrain.train.strategies.precision import Precision
from scaletrain.train.strategies.training import GradientSync


def _fully_shard() -> Any:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        raise ScaletrainError(
            f"FSDP2 (fully_shard) needs PyTorch 2.6 or newer; this is {torch.__version__}.",
            "use a newer PyTorch module or container, or strategy='zero3' (DeepSpeed).",
        ) from None
    return fully_shard


def device_mesh(env: DistEnv, options: WrapOptions) -> Any:
    """A 1-D mesh over all ranks (FSDP) or a replicate × shard mesh (HSDP)."""
    from torch.distributed.device_mesh import init_device_mesh

    if options.strategy == "hsdp":
        shard = options.shard_size or env.local_world_size
        return init_device_mesh(
            env.device.type, (env.world_size // shard, shard), mesh_dim_names=("replicate", "shard")
        )
    return init_device_mesh(env.device.type, (env.world_size,), mesh_dim_names=("shard",))


def _copy_from_rank_zero(module: nn.Module, device: torch.device) -> None:
    """Give every rank rank 0's weights, as DDP does, before they are cut into shards."""
    if dist.get_world_size() == 1:
        return
    from torch.distributed.tensor import DTensor

    tensors = [*module.parameters(), *module.buffers()]
    for tensor in tensors:
        if isinstance(tensor, DTensor):
            continue  # a block sharded before: already copied
        on_device = tensor.data.to(device)
        dist.broadcast(on_device, src=0)
        tensor.data.copy_(on_device)


def shard_model(
    model: nn.Module,
    blocks: list[nn.Module],
    env: DistEnv,
    options: WrapOptions,
    precision: Precision,
) -> nn.Module:
    """Apply fully_shard to every block, then to the model (which takes the remaining
    parameters: embeddings, heads); the model's class is extended in place."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    fully_shard = _fully_shard()
    mesh = device_mesh(env, options)
    reduce = (
        None if precision.reduce == torch.float32 and not precision.is_mixed else precision.reduce
    )
    inner = MixedPrecisionPolicy(
        param_dtype=precision.compute if precision.is_mixed else None, reduce_dtype=reduce
    )
    # The model's outputs in float32, as autocast gives them under DDP, for a precise loss.
    outer = MixedPrecisionPolicy(
        param_dtype=inner.param_dtype,
        reduce_dtype=reduce,
        output_dtype=torch.float32 if precision.is_mixed else None,
    )
    shard_options = {"mesh": mesh, "reshard_after_forward": options.reshard_after_forward}
    for block in blocks:
        _copy_from_rank_zero(block, env.device)
        fully_shard(block, mp_policy=inner, **shard_options)
    _copy_from_rank_zero(model, env.device)
    fully_shard(model, mp_policy=outer, **shard_options)
    average_gradients(
        [*blocks, model], mesh, reduce_dtype=precision.reduce, hsdp=options.strategy == "hsdp"
    )
    return model


def rebind_optimizer(optimizer: Optimizer, names: dict[int, str], model: nn.Module) -> None:
    """Point the optimizer at the sharded parameters that replaced the ones it was made with.

    `names` maps id(parameter) -> name from before sharding; the optimizer must be fresh.
    """
    if optimizer.state:
        raise ScaletrainError(
            "The optimizer already has state, which cannot follow the parameters into shards.",
            "create the optimizer before the first step and wrap it with the model; resume "
            "its state with the Checkpointer afterwards.",
        )
    sharded = dict(model.named_parameters())
    for group in optimizer.param_groups:
        try:
            group["params"] = [sharded[names[id(parameter)]] for parameter in group["params"]]
        except KeyError:
            raise ScaletrainError(
                "The optimizer holds parameters that are not in the wrapped model.",
                "create the optimizer from model.parameters() of the model you wrap.",
            ) from None


def clip_sharded_gradients(parameters: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip to the norm of all gradients over all shards (each rank sees its shards only)."""
    from torch.distributed.tensor import DTensor

    grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()  # sums the squares of every shard's part
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)
    return norm


def fsdp_gradient_sync(model: nn.Module, options: WrapOptions) -> GradientSync:
    """FSDP skips the reduce-scatter on accumulation micro-steps (gradients stay unsharded
    until the last one: more memory, no communication); HSDP keeps reduce-scattering
    within the node and skips only the all-reduce across nodes."""
    from torch.distributed.fsdp import FSDPModule

    assert isinstance(model, FSDPModule)
    if options.strategy == "hsdp":
        return model.set_requires_all_reduce
    return model.set_requires_gradient_sync
