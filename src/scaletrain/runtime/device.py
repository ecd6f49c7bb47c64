"""Choose the device of a process from its local rank and the devices it can see."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.layout import ProcessLayout

# Slurm sets ROCR_VISIBLE_DEVICES on LUMI; HIP_ and CUDA_ are set by users and containers.
VISIBILITY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """A device as torch names it: type 'cuda' or 'cpu', and an index for GPUs."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def describe_visibility(environ: Mapping[str, str]) -> str:
    """The visibility variables that are set, e.g. 'ROCR_VISIBLE_DEVICES=3', for messages."""
    settings = [f"{name}={environ[name]}" for name in VISIBILITY_VARIABLES if name in environ]
    return ", ".join(settings) if settings else "no *_VISIBLE_DEVICES variable set"


def choose_device(
    layout: ProcessLayout, visible_count: int, environ: Mapping[str, str]
) -> DeviceChoice:
    """cuda:<local rank> when each process on the node shares the same list of GPUs,
    cuda:0 when each process sees exactly one GPU, the CPU when there is none.

    `visible_count` is what torch reports after the *_VISIBLE_DEVICES variables were applied.
    """
    if visible_count == 0:
        return DeviceChoice("cpu")
    if visible_count == 1:
        # srun --gpus-per-task=1 or ROCR_VISIBLE_DEVICES=$SLURM_LOCALID: the one visible GPU
        # is this task's own, whatever its local rank.
        return DeviceChoice("cuda", 0)
    if layout.local_world_size > visible_count or layout.local_rank >= visible_count:
        raise LaunchEnvironmentError(
            f"Local rank {layout.local_rank} of {layout.local_world_size} processes on this node "
            f"has no GPU of its own: only {visible_count} are visible "
            f"({describe_visibility(environ)}).",
            f"start at most {visible_count} processes per node (torchrun --nproc-per-node="
            f"{visible_count}, or --ntasks-per-node={visible_count}), or request more GPUs "
            "(--gpus-per-node / --gres=gpu:<type>:<n>).",
        )
    return DeviceChoice("cuda", layout.local_rank)


def backend_for(device: DeviceChoice) -> str:
    """torch.distributed backend for a device: nccl (RCCL on ROCm builds) for GPUs, gloo for CPU."""
    return "nccl" if device.type == "cuda" else "gloo"
