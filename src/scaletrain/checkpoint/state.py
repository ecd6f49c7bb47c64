"""What a checkpoint holds: the training objects' state (shared by all ranks, through
torch.distributed.checkpoint) and each rank's own random generators.

Model and optimizer go through DCP's get_state_dict/set_state_dict: parameter names without
the DDP `module.` prefix, optimizer state keyed by those names, FSDP/HSDP parameters as the
shards each rank holds (no gather), so the same checkpoint loads into DDP, FSDP, HSDP or a
plain module, with any number of processes. A DeepSpeed engine's state has a layout of its
own (deepspeed_state.py) that loads into DeepSpeed at any number of processes.

Each rank's generators are saved as JSON text (never pickle) inside its own DCP shard
(writer.py, RANK_STATE_KEY). Rank N gets its own state back on resume, so dropout masks and
augmentations continue exactly; when a run resumes with fewer processes the extra states are
ignored, with more processes the new ranks keep their seeds.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.optim import Optimizer

from scaletrain.checkpoint.deepspeed_state import DeepSpeedState, is_deepspeed_engine


class HasState(Protocol):
    """An LR scheduler, a GradScaler, or anything else with state_dict/load_state_dict."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """The part of a tensor this rank holds: a DTensor's local shard, any other tensor whole."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def storage_of(value: Any) -> int | None:
    """The address of a tensor's (local) data, to recognise it in a state dict; None for
    anything else, and for tensors without plain storage (ShardedTensor, empty ones)."""
    if not isinstance(value, torch.Tensor):
        return None
    local = local_part(value)
    try:
        return int(local.data_ptr()) or None
    except RuntimeError:
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingObjects:
    model: nn.Module
    optimizers: Sequence[Optimizer] = ()
    others: dict[str, HasState] | None = None
    """Named extras (scheduler, scaler); their state must be plain data and tensors."""

    @property
    def steps_can_be_hooked(self) -> bool:
        """Whether every optimizer is a torch optimizer, whose step pre-hooks tell when its
        parameters and state are about to change (not a DeepSpeed engine's)."""
        return (
            not is_deepspeed_engine(self.model)
            and bool(self.optimizers)
            and all(isinstance(optimizer, Optimizer) for optimizer in self.optimizers)
        )

    def changed_only_by_steps(self) -> frozenset[int]:
        """Addresses of the tensors only `optimizer.step()` changes: the parameters the
        optimizers update, and their state (momentum, Adam's moments and step)."""
        found: set[int | None] = set()
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                found.update(storage_of(parameter) for parameter in group["params"])
            for per_parameter in optimizer.state.values():
                found.update(storage_of(value) for value in per_parameter.values())
        return frozenset(address for address in found if address is not None)

    def state_dict(self) -> dict[str, Any]:
        """Everything to save, keyed 'model', 'optimizer' and the extras' names."""
        state: dict[str, Any]
        if is_deepspeed_engine(self.model):
            state = DeepSpeedState(self.model).state_dict()  # its optimizer is inside
        else:
            model_state, optimizer_state = get_state_dict(self.model, list(self.optimizers))
            state = {"model": model_state}
            if self.optimizers:
                state["optimizer"] = optimizer_state
        for name, thing in (self.others or {}).items():
            state[name] = thing.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put a loaded state dict (same keys as `state_dict()`) into the objects."""
        if is_deepspeed_engine(self.model):
            DeepSpeedState(self.model).load_state_dict(state)
        else:
            set_state_dict(
                self.model,
                list(self.optimizers),
                model_state_dict=state["model"],
                optim_state_dict=state.get("optimizer", {}),
            )
        for name, thing in (self.others or {}).items():
            thing.load_state_dict(state[name])


def _encode(state: torch.Tensor) -> str:
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def _decode(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def capture_rank_state(
    device: torch.device, loader_generator: torch.Tensor | None
) -> dict[str, Any]:
    """This rank's generator states now; `loader_generator` is the state at epoch start."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "torch": _encode(torch.get_rng_state()),
    }
    if device.type == "cuda":
        state["cuda"] = _encode(torch.cuda.get_rng_state(device))
    try:
        import numpy
    except ImportError:
        pass
    else:
        name, keys, position, has_gauss, cached = numpy.random.get_state(legacy=True)
        state["numpy"] = [name, numpy.asarray(keys).tolist(), position, has_gauss, cached]
    if loader_generator is not None:
        state["loader_generator"] = _encode(loader_generator)
    return state


def restore_random(state: dict[str, Any], device: torch.device) -> None:
    """Put this rank's random number generators back where they were when it was saved."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(_decode(state["torch"]))
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(_decode(state["cuda"]), device)
    if "numpy" in state:
        import numpy

        name, keys, position, has_gauss, cached = state["numpy"]
        numpy.random.set_state(
            (name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached)
        )


def saved_loader_generator(state: dict[str, Any]) -> torch.Tensor | None:
    """The loader generator's state at the start of the saved epoch, if one was saved."""
    text = state.get("loader_generator")
    return None if text is None else _decode(text)
