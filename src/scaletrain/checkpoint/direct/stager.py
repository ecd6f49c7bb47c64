"""The direct storage's stager: a private CPU copy of the state for an asynchronous save,
made at the step boundary except for what only optimizer steps change, which the file
image copies in the background (file_image.py, the early copy).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch

from scaletrain.checkpoint.state import storage_of

# A tensor left for the writer thread to copy: its place in the staged state, and the tensor.
Deferred = tuple[dict[Any, Any], Any, torch.Tensor]


def stage(
    state: Any,
    into: Any = None,
    *,
    pin: bool = True,
    later: frozenset[int] = frozenset(),
    deferred: list[Deferred] | None = None,
) -> Any:
    """A private CPU copy of a state dict, so that training can go on changing the original.

    Tensors are copied into the buffers of `into` (the previous copy, already written) when
    their shapes match: no new memory to fault in at every save. New buffers for GPU tensors
    are pinned (page-locked) when `pin`, for a fast device-to-host copy; torch's caching
    host allocator rounds each one up to a power of two.

    Tensors of a dict whose data is at an address in `later` are not copied: their place is
    left empty and appended to `deferred` (the writer thread copies them into the file).
    """
    if type(state) is torch.Tensor:  # DTensor and other subclasses: copied by their own rules
        same = isinstance(into, torch.Tensor) and (into.shape, into.dtype) == (
            state.shape,
            state.dtype,
        )
        pinned = pin and state.is_cuda
        buffer = into if same else torch.empty_like(state, device="cpu", pin_memory=pinned)
        return buffer.copy_(state.detach())
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        earlier = into if isinstance(into, dict) else {}
        staged: dict[Any, Any] = {}
        for key, value in state.items():
            if deferred is not None and storage_of(value) in later:
                staged[key] = None
                deferred.append((staged, key, value))
            else:
                staged[key] = stage(
                    value, earlier.get(key), pin=pin, later=later, deferred=deferred
                )
        return staged
    if isinstance(state, list | tuple):
        same_length = isinstance(into, list | tuple) and len(into) == len(state)
        return type(state)(
            stage(value, old, pin=pin, later=later, deferred=deferred)
            for value, old in itertools.zip_longest(state, into if same_length else ())
        )
    return copy.deepcopy(state)
