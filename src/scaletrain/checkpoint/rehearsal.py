"""A rehearsal inside the training processes (`scaletrain submit --rehearse`).

With SCALETRAIN_REHEARSAL_STEPS=N the Checkpointer trains N steps, saves a checkpoint, loads
it back into the live model and optimizer through its own resume path, trains N more steps
and stops (stopped.json, reason "rehearsal", exit code 0): a save or a resume that is broken
fails here, minutes into a short job, not after the first requeue of the real one. Every rank
acts at the same step, so no vote is needed.

Rank 0 then writes metrics/rehearsal.json, which `scaletrain status` turns into the report
(observe/rehearsal.py): when each step ended, the save and the load, whether the weights came
back, peak memory, and the steps of the whole run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.data import DataLoader

from scaletrain.checkpoint.deepspeed_state import is_deepspeed_engine
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import JOB_STARTED, REHEARSAL_STEPS
from scaletrain.runtime.layout import DistEnv
from scaletrain.train.measures import peak_memory_per_rank
from scaletrain.train.ranks import print0

Due = Literal["resume", "stop"]


@dataclass(kw_only=True, slots=True)
class Rehearsal:
    """What a rehearsal does at each step, and what it measured."""

    steps: int
    """Steps before the save and resume, and again after it."""
    job_started: float | None = None
    """When the job's batch shell started (s since the epoch), for the start-up time."""
    step_ends: list[float] = field(default_factory=list)
    """When each step ended (s since the epoch), on rank 0."""
    epochs: int | None = None
    batches_per_epoch: int | None = None
    samples_per_step: int | None = None
    save_s: float | None = None
    load_s: float | None = None
    weights_came_back: bool | None = None
    """The model's tensors equal after the load to what was saved; None: not compared."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Rehearsal | None:
        """The rehearsal a job asked for, or None in any other run."""
        steps = environ.get(REHEARSAL_STEPS, "")
        if not steps:
            return None
        if not steps.isdigit() or int(steps) < 1:
            raise ScaletrainError(
                f"{REHEARSAL_STEPS}={steps!r} is not a positive number of steps.",
                f"set {REHEARSAL_STEPS} to a whole number such as 10, or unset it.",
            )
        started = environ.get(JOB_STARTED, "")
        print0(
            f"scaletrain: rehearsal ({REHEARSAL_STEPS}={steps}): {steps} steps, save, resume, "
            f"{steps} more steps, stop",
            file=sys.stderr,
        )
        return cls(steps=int(steps), job_started=float(started) if started.isdigit() else None)

    def note_loader(self, loader: Iterable[Any], world_size: int) -> None:
        """The run's length and batch, from the loader of its epochs."""
        if isinstance(loader, Sized):
            self.batches_per_epoch = len(loader)
        if isinstance(loader, DataLoader) and loader.batch_size is not None:
            self.samples_per_step = loader.batch_size * world_size

    def at_step(self, step: int) -> Due | None:
        """Note that `step` ended; what is due now."""
        self.step_ends.append(time.time())
        if step == self.steps:
            return "resume"
        return "stop" if step >= 2 * self.steps else None

    def save_and_resume(
        self, model: nn.Module, *, save: Callable[[], None], resume: Callable[[], None]
    ) -> None:
        """Save, then load that checkpoint back; fail when the weights do not come back."""
        before = _fingerprint(model)
        started = time.monotonic()
        save()
        saved = time.monotonic()
        resume()
        self.save_s, self.load_s = saved - started, time.monotonic() - saved
        if before is not None:
            self.weights_came_back = _fingerprint(model) == before
            if not self.weights_came_back:
                raise ScaletrainError(
                    f"The rehearsal's checkpoint of step {self.steps} did not load back the "
                    "weights it saved.",
                    "the model's state_dict does not round-trip: check custom state_dict or "
                    "load_state_dict methods, and tensors that change outside optimizer steps.",
                )

    def finish(self, folder: RunFolder, env: DistEnv) -> None:
        """Rank 0 writes metrics/rehearsal.json (every rank takes part: peak memory)."""
        peaks = peak_memory_per_rank(env.device)
        if not env.is_main:
            return
        total = None
        if self.epochs is not None and self.batches_per_epoch is not None:
            total = self.epochs * self.batches_per_epoch
        record = {
            **asdict(self),
            "world_size": env.world_size,
            "total_steps": total,
            "peak_memory_gb": [round(peak / 1e9, 3) for peak in peaks],
        }
        folder.rehearsal_report.parent.mkdir(parents=True, exist_ok=True)
        folder.rehearsal_report.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _fingerprint(model: nn.Module) -> list[str] | None:
    """Each tensor of the model's state summed on this rank (its own shard of a sharded one),
    as text so that a NaN equals a NaN: a value that does not come back changes its sum. None
    for a DeepSpeed engine, whose partitions the checkpoint's own checks cover."""
    if is_deepspeed_engine(model):
        return None
    sums = []
    for value in model.state_dict().values():
        if isinstance(value, torch.Tensor):
            local = value.to_local() if hasattr(value, "to_local") else value  # a DTensor
            sums.append(repr(float(local.detach().double().sum())))
    return sums
