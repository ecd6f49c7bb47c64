"""Ranks agree at step boundaries on whether to save or stop, without stalling a step.

Each rank puts its own view (a signal it received; on rank 0 also the stop-request file and
the clock) into a tiny all_reduce on a gloo group of its own, started without waiting at one
step boundary and read at the next. By then it has long finished, so no step waits for it
and no GPU is synchronised, and every rank reads the same result at the same step: a
decision takes effect one step after it was made, on all ranks together.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import torch
import torch.distributed as dist

STOP_FILE_REASON = "stop-requested"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ballot:
    stop_signal: int = 0
    """Number of a stop signal some rank received (0: none)."""
    stop_file: bool = False
    """The run folder's stop-requested file exists (seen by rank 0)."""
    save_due: bool = False
    """The time-based save interval is over (rank 0's clock)."""

    @property
    def stop(self) -> bool:
        return bool(self.stop_signal) or self.stop_file

    @property
    def stop_reason(self) -> str:
        """'stop-requested' for the file, else the signal's name, e.g. 'SIGTERM'."""
        if self.stop_file:
            return STOP_FILE_REASON
        return signal.Signals(self.stop_signal).name

    def to_tensor(self) -> torch.Tensor:
        return torch.tensor(
            [self.stop_signal, int(self.stop_file), int(self.save_due)], dtype=torch.int64
        )

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> Ballot:
        stop_signal, stop_file, save_due = tensor.tolist()
        return cls(stop_signal=stop_signal, stop_file=bool(stop_file), save_due=bool(save_due))


class StepVote:
    """One vote in flight at a time: `start` at a boundary, `result` at the next one."""

    def __init__(self, group: dist.ProcessGroup | None, world_size: int) -> None:
        self._group = group
        self._world_size = world_size
        self._tensor: torch.Tensor | None = None
        self._work: dist.Work | None = None

    def start(self, ballot: Ballot) -> None:
        """Cast this rank's ballot; every rank must call this at the same step."""
        self._tensor = ballot.to_tensor()
        if self._world_size > 1:
            # MAX: any rank's stop signal or rank 0's alone counts for everyone.
            self._work = dist.all_reduce(
                self._tensor, op=dist.ReduceOp.MAX, group=self._group, async_op=True
            )

    def result(self) -> Ballot | None:
        """The agreed outcome of the vote started at the previous boundary, if any."""
        tensor, work = self._tensor, self._work
        self._tensor = self._work = None
        if tensor is None:
            return None
        if work is not None:
            work.wait()
        return Ballot.from_tensor(tensor)
