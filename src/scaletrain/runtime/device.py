"""Choose the device of a process from its launcher, its local rank and the GPUs it can see.

Two ways of giving GPUs to processes, and only two:
- srun/mpirun tasks with one GPU each (`--gpus-per-task=1`, `ROCR_VISIBLE_DEVICES=$SLURM_LOCALID`):
  the one visible GPU is the task's own, `cuda:0`, whatever its local rank;
- processes that share a node's list (torchrun, accelerate, srun with all GPUs visible):
  `cuda:<local rank>`, so the node needs a GPU per local process. Two processes on one GPU
  are not a slower run but a crash in NCCL ("Duplicate GPU detected", NVIDIA/nccl#1241).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.layout import ProcessLayout, is_per_task_launcher

# Slurm sets ROCR_VISIBLE_DEVICES on LUMI; HIP_ and CUDA_ are set by users and containers.
VISIBILITY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# ROCR selects physical GPUs first; HIP_ and CUDA_ then pick from what ROCR left visible.
_SELECTION_ORDER = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# Values that hide every GPU (CUDA's documented "-1", and what Slurm writes without GPUs).
_NO_GPU_VALUES = ("-1", "NoDevFiles")
# Slurm's count of the GPUs allocated to the step on this node (any GPU vendor).
SLURM_GPUS_VARIABLE = "SLURM_GPUS_ON_NODE"


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


def _entries(value: str) -> list[str]:
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    return [] if entries[:1] and entries[0] in _NO_GPU_VALUES else entries


def visible_gpus(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The GPUs the visibility variables leave, in torch's order: physical numbers or UUIDs
    (`GPU-…`, `MIG-…`) as written; None when no variable is set.

    A variable applied after another one picks by position from what the first left
    (HIP_VISIBLE_DEVICES=1 after ROCR_VISIBLE_DEVICES=4,5 is GPU 5); a UUID there names a
    GPU directly.
    """
    visible: list[str] | None = None
    for variable in _SELECTION_ORDER:
        if variable not in environ:
            continue
        entries = _entries(environ[variable])
        if visible is None:
            visible = entries
            continue
        picked = []
        for entry in entries:
            if not entry.isdigit():
                picked.append(entry)
            elif int(entry) < len(visible):
                picked.append(visible[int(entry)])
        visible = picked
    return None if visible is None else tuple(visible)


def gpus_given(environ: Mapping[str, str]) -> str | None:
    """What says this process was given GPUs (for the message), or None: a visibility
    variable that lists GPUs, or Slurm's GPU count for the step."""
    listed = visible_gpus(environ)
    if listed:
        return describe_visibility(environ)
    count = environ.get(SLURM_GPUS_VARIABLE, "")
    if count.isdigit() and int(count) > 0:
        return f"{SLURM_GPUS_VARIABLE}={count}"
    return None


def choose_device(
    layout: ProcessLayout, visible_count: int, environ: Mapping[str, str]
) -> DeviceChoice:
    """cuda:0 for a srun/mpirun task that sees one GPU, cuda:<local rank> when the node's
    processes share one list of GPUs, the CPU when the process was given no GPU.

    `visible_count` is what torch reports after the *_VISIBLE_DEVICES variables were applied.
    Raises LaunchEnvironmentError when a process has no GPU of its own, and when it was given
    GPUs that torch cannot see (a job that asked for GPUs must not train on the CPU unnoticed).
    """
    if visible_count == 0:
        given = gpus_given(environ)
        if given is not None:
            raise LaunchEnvironmentError(
                f"This process was given GPUs ({given}) but torch sees none.",
                "use a PyTorch built for the GPUs (the cluster's PyTorch module or "
                "container; torch.version.cuda or torch.version.hip must not be None) and "
                "check that the job's GPUs work (`rocm-smi` / `nvidia-smi` in the job); to "
                "train on the CPU on purpose, call scaletrain.init(device='cpu').",
            )
        return DeviceChoice("cpu")
    if visible_count == 1 and is_per_task_launcher(layout.launcher):
        # srun --gpus-per-task=1 or ROCR_VISIBLE_DEVICES=$SLURM_LOCALID: the one visible GPU
        # is this task's own, whatever its local rank.
        return DeviceChoice("cuda", 0)
    if layout.local_world_size > visible_count or layout.local_rank >= visible_count:
        started = (
            f"{layout.launcher} started {layout.local_world_size} processes on this node"
            if not is_per_task_launcher(layout.launcher)
            else f"{layout.local_world_size} tasks run on this node"
        )
        raise LaunchEnvironmentError(
            f"{started} but only {visible_count} GPU(s) are visible "
            f"({describe_visibility(environ)}): each process needs a GPU of its own "
            "(NCCL/RCCL cannot run two ranks on one GPU).",
            f"start at most {visible_count} processes per node (torchrun --nproc-per-node="
            f"{visible_count}, or --ntasks-per-node={visible_count}), or request more GPUs "
            "(--gpus-per-node / --gres=gpu:<type>:<n>).",
        )
    return DeviceChoice("cuda", layout.local_rank)


def parse_device(device: str) -> DeviceChoice:
    """'cpu', 'cuda' or 'cuda:N' as given to scaletrain.init(device=...)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise LaunchEnvironmentError(
            f"device={device!r} is not a device scaletrain can use.",
            "use 'cuda' (this rank's GPU, chosen as without the argument), 'cuda:<n>', or "
            "'cpu'; AMD GPUs are 'cuda' in PyTorch too.",
        )
    return DeviceChoice(kind, int(index) if index else None)


def backend_for(device: DeviceChoice) -> str:
    """torch.distributed backend for a device: nccl (RCCL on ROCm builds) for GPUs, gloo for CPU."""
    return "nccl" if device.type == "cuda" else "gloo"
