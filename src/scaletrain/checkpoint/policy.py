"""When to save: every N steps and/or every T minutes (besides stops and the end of training)."""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain.errors import ScaletrainError


@dataclass(frozen=True, kw_only=True, slots=True)
class SavePolicy:
    every_steps: int | None = None
    """Save when the step count is a multiple of this (the same step on every rank)."""
    every_minutes: float | None = None
    """Save when this long has passed since the last save, by rank 0's clock."""
    keep: int = 3
    """Complete checkpoints kept; older ones are deleted after each save."""

    def __post_init__(self) -> None:
        if self.every_steps is not None and self.every_steps < 1:
            raise ScaletrainError(
                f"every_steps={self.every_steps} would never save.",
                "use a positive number of steps, or None to save by time only.",
            )
        if self.every_minutes is not None and self.every_minutes <= 0:
            raise ScaletrainError(
                f"every_minutes={self.every_minutes} is not a time interval.",
                "use a positive number of minutes (e.g. 30), or None to save by steps only.",
            )
        if self.keep < 1:
            raise ScaletrainError(
                f"keep={self.keep} would delete every checkpoint, the newest included.",
                "keep at least 1 checkpoint (2 or more guard against a damaged newest one).",
            )

    def due_by_steps(self, step: int) -> bool:
        return self.every_steps is not None and step % self.every_steps == 0

    def due_by_time(self, seconds_since_save: float) -> bool:
        return self.every_minutes is not None and seconds_since_save >= self.every_minutes * 60

    def reason(self, step: int) -> str:
        """Why a periodic save happens at `step`, for logs and the manifest."""
        if self.due_by_steps(step):
            return f"every {self.every_steps} steps"
        return f"every {self.every_minutes:g} minutes"
