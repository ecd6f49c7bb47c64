"""Peak memory of this process: what the GPU's caching allocator reserved, or on the CPU the
process's peak resident set (which also counts PyTorch's own libraries)."""

from __future__ import annotations

import resource
import sys

import torch
import torch.distributed as dist

from scaletrain.runtime.process_group import all_gather_objects

# ru_maxrss is in kibibytes on Linux and in bytes on macOS.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024


def peak_memory_bytes(device: torch.device) -> int:
    """The most memory this process held on `device` so far."""
    if device.type == "cuda":
        # Reserved, not allocated: what the allocator took from the GPU is what runs out.
        return int(torch.cuda.max_memory_reserved(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT


def peak_memory_per_rank(device: torch.device) -> list[int]:
    """Every rank's peak memory in bytes, in rank order, on every rank (a collective)."""
    mine = peak_memory_bytes(device)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [mine]
    return [int(value) for value in all_gather_objects(mine)]
