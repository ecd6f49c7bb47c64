"""The training step that fits a strategy: micro-batches, backward, clipping, optimizer step.

One loop for every strategy; what differs (how gradient synchronisation is skipped, the loss
scaler, clipping over shards, DeepSpeed's engine) is decided by `wrap` and hidden here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from scaletrain.core.errors import ScaletrainError

GradientSync = Callable[[bool], None]
"""Turns gradient synchronisation over ranks on or off for the next backward pass."""

Clip = Callable[[list[nn.Parameter], float], torch.Tensor]
"""Clips the gradients of the parameters to a global norm; returns the norm before clipping."""


def clip_local_gradients(parameters: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clipping where every rank holds whole gradients (DDP, one process)."""
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def no_gradient_sync(_: bool) -> None:
    """One process: nothing to synchronise."""


class Wrapped:
    """A model and its optimizer under one strategy, with the step that fits the strategy.

        training = st.wrap(model, optimizer, strategy="fsdp", precision="bf16",
                           accumulation_steps=4, max_grad_norm=1.0)
        for x, y in ckpt.batches(train_loader):      # this rank's share of one step
            for inputs, targets in training.micro_batches(x, y):
                training.backward(loss_fn(training.model(inputs), targets))
            training.step()                           # clip, step, zero the gradients

    Gradients are synchronised over ranks on the last micro-batch of a step only.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: Optimizer,
        strategy: str,
        accumulation_steps: int = 1,
        max_grad_norm: float | None = None,
        scaler: Any = None,
        gradient_sync: GradientSync = no_gradient_sync,
        clip: Clip = clip_local_gradients,
    ) -> None:
        self.model = model
        """What to call for the forward pass (DDP module, sharded module or DeepSpeed engine)."""
        self.optimizer = optimizer
        """Your optimizer, for learning-rate schedules (its parameters may now be shards)."""
        self.strategy = strategy
        self.accumulation_steps = accumulation_steps
        self.max_grad_norm = max_grad_norm
        self.scaler = scaler
        """The fp16 loss scaler (None otherwise); give it to the Checkpointer as `scaler`."""
        self._gradient_sync = gradient_sync
        self._clip = clip
        self._backwards = 0
        self._gradient_sync(accumulation_steps == 1)

    def micro_batches(self, *tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
        """Split this rank's batch into `accumulation_steps` equal micro-batches (dimension 0)."""
        size = len(tensors[0])
        if size % self.accumulation_steps or any(len(tensor) != size for tensor in tensors):
            raise ScaletrainError(
                f"A batch of {size} samples on this rank does not split into "
                f"{self.accumulation_steps} equal micro-batches.",
                "make the global batch size a multiple of processes × accumulation_steps "
                "(st.loader checks it: pass it the same global_batch_size).",
            )
        parts = [tensor.chunk(self.accumulation_steps) for tensor in tensors]
        return zip(*parts, strict=True)

    def _count_backward(self) -> bool:
        """Count one micro-batch; True when it is the last of the step."""
        self._backwards += 1
        if self._backwards > self.accumulation_steps:
            raise ScaletrainError(
                f"backward() was called {self._backwards} times without step() "
                f"(accumulation_steps={self.accumulation_steps}).",
                "call training.step() after the backward pass of the last micro-batch.",
            )
        return self._backwards == self.accumulation_steps

    def backward(self, loss: torch.Tensor) -> None:
        """Backward pass of one micro-batch: averaged over micro-batches, scaled for fp16."""
        last = self._count_backward()
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        torch.autograd.backward(loss)
        if not last:
            self._gradient_sync(self._backwards == self.accumulation_steps - 1)

    def _check_step(self) -> None:
        if self._backwards != self.accumulation_steps:
            raise ScaletrainError(
                f"step() after {self._backwards} backward pass(es); this step accumulates "
                f"{self.accumulation_steps}.",
                "call training.backward(loss) once per micro-batch (training.micro_batches "
                "splits a batch) and training.step() after the last one.",
            )
        self._backwards = 0

    def step(self) -> torch.Tensor | None:
        """Unscale (fp16), clip, step the optimizer and zero the gradients.

        Returns the gradient norm before clipping when `max_grad_norm` is set, else None.
        """
        self._check_step()
        norm = None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.max_grad_norm is not None:
            norm = self._clip(self._parameters(), self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.accumulation_steps > 1:
            self._gradient_sync(False)
        return norm

    def _parameters(self) -> list[nn.Parameter]:
        groups: Iterable[dict[str, Any]] = self.optimizer.param_groups
        return [parameter for group in groups for parameter in group["params"]]
