"""The objects a checkpoint restores, as one state dict for torch.distributed.checkpoint.

Model and optimizer go through DCP's get_state_dict/set_state_dict: parameter names without
the DDP `module.` prefix, optimizer state keyed by those names, so the same checkpoint loads
into DDP, a plain module, or (later) FSDP, with any number of processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.optim import Optimizer


class HasState(Protocol):
    """An LR scheduler, a GradScaler, or anything else with state_dict/load_state_dict."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingObjects:
    model: nn.Module
    optimizers: Sequence[Optimizer] = ()
    others: dict[str, HasState] | None = None
    """Named extras (scheduler, scaler); their state must be plain data and tensors."""

    def state_dict(self) -> dict[str, Any]:
        """Everything to save, keyed 'model', 'optimizer' and the extras' names."""
        model_state, optimizer_state = get_state_dict(self.model, list(self.optimizers))
        state: dict[str, Any] = {"model": model_state}
        if self.optimizers:
            state["optimizer"] = optimizer_state
        for name, thing in (self.others or {}).items():
            state[name] = thing.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put a loaded state dict (same keys as `state_dict()`) into the objects."""
        set_state_dict(
            self.model,
            list(self.optimizers),
            model_state_dict=state["model"],
            optim_state_dict=state.get("optimizer", {}),
        )
        for name, thing in (self.others or {}).items():
            thing.load_state_dict(state[name])
