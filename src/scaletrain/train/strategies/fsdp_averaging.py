"""FSDP's gradient average where the process group's collectives do not average.

FSDP2 averages gradients over ranks by asking the reduce-scatter (and HSDP's all-reduce) for
`ReduceOp.AVG` when it reduces in float32 or bfloat16. Some torch releases' gloo (CPU) groups
take that and sum (torch 2.7: the gradients of N ranks come out N times too large, so the
step size depends on the number of ranks and a resume at another world size drifts), or
refuse it in an all-reduce. This is found by asking the group once, not by version number,
and mended with FSDP's public all-reduce hook, which divides what the reduce-scatter summed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from scaletrain.core.errors import ScaletrainError

# The dtypes FSDP reduces in with ReduceOp.AVG (others: a pre- and post-division and SUM).
_AVERAGED_IN = (torch.float32, torch.bfloat16)


def reduce_scatter_sums_averages(group: dist.ProcessGroup, device: torch.device) -> bool:
    """Whether this group's reduce-scatter, asked for an average, gives the sum (a collective)."""
    size = dist.get_world_size(group)
    output = torch.zeros(1, device=device)
    # reduce_scatter_tensor's newer name, where this torch has it (the old one warns there).
    reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    reduce_scatter(output, torch.ones(size, device=device), op=dist.ReduceOp.AVG, group=group)
    return size > 1 and output.item() == float(size)


def all_reduce_averages(group: dist.ProcessGroup, device: torch.device) -> bool:
    """Whether this group's all-reduce can average (a collective)."""
    try:
        dist.all_reduce(torch.ones(1, device=device), op=dist.ReduceOp.AVG, group=group)
    except (RuntimeError, ValueError):
        return False
    return True


def average_gradients(
    modules: list[nn.Module], mesh: object, *, reduce_dtype: torch.dtype, hsdp: bool
) -> None:
    """Make each sharded module's gradients the average over ranks where the group's
    reduce-scatter sums instead; refuse HSDP where its all-reduce cannot average."""
    if reduce_dtype not in _AVERAGED_IN:
        return
    device = torch.device(mesh.device_type)  # type: ignore[attr-defined]
    if hsdp:
        replicate = mesh.get_group("replicate")  # type: ignore[attr-defined]
        if not all_reduce_averages(replicate, device):
            raise ScaletrainError(
                f"strategy='hsdp' needs an all-reduce that averages, and this torch "
                f"({torch.__version__}) has none on {dist.get_backend(replicate)} groups.",
                "use strategy='fsdp' (or 'ddp') here, or a newer torch; on GPUs (NCCL, RCCL) "
                "HSDP runs.",
            )
    shard = mesh.get_group("shard")  # type: ignore[attr-defined]
    if not reduce_scatter_sums_averages(shard, device):
        return
    size = dist.get_world_size(shard)
    for module in modules:
        module.set_all_reduce_hook(lambda reduced: reduced.div_(size))  # type: ignore[operator]
