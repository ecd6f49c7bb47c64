"""When to save and when to stop: the save policy, and the vote in which ranks agree on it.

Every rank must save or stop at the same step. Steps counted (`every_steps`) need no
agreement; everything else does: a signal one rank received, rank 0's view of the
stop-requested file, rank 0's clock for `every_minutes`. Ranks agree in a vote: a tiny
all_reduce (MAX) of their ballots on a CPU (gloo) group, started without waiting at one step
boundary and read at the next, so that no step waits for it and no GPU is synchronised.

A vote costs a collective, whose latency grows with the number of ranks (about 2(N-1)
network latencies for a small gloo all_reduce), so ranks do not vote at every step: rank 0
measures the step time and puts into each ballot how many steps to wait until the next vote,
about `VOTE_INTERVAL_S` apart; that number travels in the vote itself, so every rank starts
the next vote at the same step. A stop request is therefore acted on within about
VOTE_INTERVAL_S plus two steps (plus the stop-file poll interval for the file); see
docs/checkpoints.md.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from scaletrain.checkpoint.interval import AUTO, auto_interval
from scaletrain.core.errors import ScaletrainError

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

STOP_FILE_REASON = "stop-requested"
# Seconds between votes, whatever the step time: a stop or a timed save waits at most this
# long for the next vote; a vote per second is invisible next to any training step.
VOTE_INTERVAL_S = 1.0
# Never more steps than this between votes, even for steps of microseconds.
_MAX_STEPS_BETWEEN_VOTES = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class SavePolicy:
    every_steps: int | None = None
    """Save when the step count is a multiple of this (the same step on every rank)."""
    every_minutes: float | Literal["auto"] | None = AUTO
    """Save when this long has passed since the last save, by rank 0's clock; "auto": as often
    as keeps saves at SAVE_COST_FRACTION of the time, from the last save's measured time."""
    keep: int = 3
    """Complete checkpoints kept; older ones are deleted after each save."""

    def __post_init__(self) -> None:
        if self.every_steps is not None and self.every_steps < 1:
            raise ScaletrainError(
                f"every_steps={self.every_steps} would never save.",
                "use a positive number of steps, or None to save by time only.",
            )
        if self.every_minutes not in (None, AUTO) and not (
            isinstance(self.every_minutes, int | float) and self.every_minutes > 0
        ):
            raise ScaletrainError(
                f"every_minutes={self.every_minutes} is not a time interval.",
                'use a positive number of minutes (e.g. 30), "auto" (the default) to save as '
                "often as costs about 2% of the time, or None to save by steps only.",
            )
        if self.keep < 1:
            raise ScaletrainError(
                f"keep={self.keep} would delete every checkpoint, the newest included.",
                "keep at least 1 checkpoint (2 or more guard against a damaged newest one).",
            )

    def due_by_steps(self, step: int) -> bool:
        return self.every_steps is not None and step % self.every_steps == 0

    def interval_s(self, save_seconds: float | None = None) -> float | None:
        """Seconds between timed saves; `save_seconds`: how long the last save stalled."""
        if self.every_minutes is None:
            return None
        if self.every_minutes == AUTO:
            return auto_interval(save_seconds)
        return float(self.every_minutes) * 60

    def due_by_time(self, seconds_since_save: float, save_seconds: float | None = None) -> bool:
        interval = self.interval_s(save_seconds)
        return interval is not None and seconds_since_save >= interval

    def reason(self, step: int, save_seconds: float | None = None) -> str:
        """Why a periodic save happens at `step`, for logs and the manifest."""
        if self.due_by_steps(step):
            return f"every {self.every_steps} steps"
        minutes = (self.interval_s(save_seconds) or 0) / 60
        return f"every {minutes:.3g} minutes" + (" (auto)" if self.every_minutes == AUTO else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class Ballot:
    stop_signal: int = 0
    """Number of a stop signal some rank received (0: none)."""
    stop_file: bool = False
    """The run folder's stop-requested file exists (seen by rank 0)."""
    save_due: bool = False
    """The time-based save interval is over (rank 0's clock)."""
    steps_to_next_vote: int = 0
    """How many steps after reading this vote the next one starts (rank 0's choice; others 0)."""

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
        import torch

        values = [self.stop_signal, int(self.stop_file), int(self.save_due)]
        return torch.tensor([*values, self.steps_to_next_vote], dtype=torch.int64)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> Ballot:
        stop_signal, stop_file, save_due, steps = tensor.tolist()
        return cls(
            stop_signal=stop_signal,
            stop_file=bool(stop_file),
            save_due=bool(save_due),
            steps_to_next_vote=steps,
        )


def steps_per_interval(seconds_per_step: float, interval_s: float = VOTE_INTERVAL_S) -> int:
    """How many steps of `seconds_per_step` fill about `interval_s` (at least 1)."""
    if seconds_per_step <= 0:
        return _MAX_STEPS_BETWEEN_VOTES
    return max(1, min(_MAX_STEPS_BETWEEN_VOTES, round(interval_s / seconds_per_step)))


class StepVote:
    """At most one vote in flight: `start` at a boundary when `due`, `result` at the next one."""

    def __init__(self, group: dist.ProcessGroup | None, world_size: int, *, is_main: bool) -> None:
        self._group = group
        self._world_size = world_size
        self._is_main = is_main
        self._tensor: torch.Tensor | None = None
        self._work: dist.Work | None = None
        self._next_vote_step = 1  # the first boundary votes: rank 0 starts measuring there
        self._last_vote: tuple[int, float] | None = None  # (step, time) of the last vote

    def due(self, step: int) -> bool:
        """Whether this boundary (after `step`) starts a vote; the same on every rank."""
        return self._tensor is None and step >= self._next_vote_step

    def steps_to_next_vote(self, step: int) -> int:
        """Rank 0's choice: about VOTE_INTERVAL_S of steps at the pace since the last vote; at
        the first vote, the next step: the pace is measured from there, since a resumed run
        starts at any step."""
        last, now = self._last_vote, time.monotonic()
        self._last_vote = (step, now)
        if last is None:
            return 1
        last_step, last_time = last
        return steps_per_interval((now - last_time) / max(1, step - last_step))

    def start(self, step: int, ballot: Ballot) -> None:
        """Cast this rank's ballot at the boundary after `step`; every rank must call this at
        the same step (when `due`)."""
        import torch.distributed as dist

        if self._is_main:
            ballot = Ballot(
                stop_signal=ballot.stop_signal,
                stop_file=ballot.stop_file,
                save_due=ballot.save_due,
                steps_to_next_vote=self.steps_to_next_vote(step),
            )
        self._tensor = ballot.to_tensor()
        if self._world_size > 1:
            # MAX: any rank's stop signal, or rank 0's alone, counts for everyone.
            self._work = dist.all_reduce(
                self._tensor, op=dist.ReduceOp.MAX, group=self._group, async_op=True
            )

    def result(self, step: int) -> Ballot | None:
        """The agreed outcome of the vote in flight, read at the boundary after `step`; None
        when no vote is in flight. Sets when the next vote starts."""
        tensor, work = self._tensor, self._work
        self._tensor = self._work = None
        if tensor is None:
            return None
        if work is not None:
            work.wait()
        agreed = Ballot.from_tensor(tensor)
        self._next_vote_step = step + max(1, agreed.steps_to_next_vote) - 1
        return agreed
