"""Which ranks to profile and over which steps: `--profile RANKS[:WAIT,WARMUP,ACTIVE]`.

The same text travels from `scaletrain run/submit --profile` to every training process in
SCALETRAIN_PROFILE, where `st.profile()` and the instrumented entry read it (no torch here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.variables import PROFILE

_HINT = (
    "give the ranks and optionally the schedule in steps, e.g. --profile all, --profile 0,1 "
    "or --profile 0,3:5,2,3 (wait 5 steps, warm up 2, record 3)."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileSpec:
    """torch.profiler's schedule (seed 002: wait, warmup, active, repeat=1) for some ranks."""

    ranks: tuple[int, ...] | None = None
    """None: every rank."""
    wait: int = 5
    """Steps skipped first (start-up, first data loads, compilation)."""
    warmup: int = 2
    """Steps traced but thrown away (the profiler's own start-up cost)."""
    active: int = 3
    """Steps recorded into traces/rank-<R>.pt.trace.json."""

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise ScaletrainError(
                f"The profile schedule {self.wait},{self.warmup},{self.active} is not "
                "wait >= 0, warmup >= 0, active >= 1 steps.",
                _HINT,
            )

    def includes(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    @property
    def total_steps(self) -> int:
        return self.wait + self.warmup + self.active

    def to_text(self) -> str:
        ranks = "all" if self.ranks is None else ",".join(str(rank) for rank in self.ranks)
        return f"{ranks}:{self.wait},{self.warmup},{self.active}"


def parse_profile(text: str) -> ProfileSpec:
    """`all`, `0,1` or `0,1:5,2,3` -> ProfileSpec; anything else is an error with the fix."""
    ranks_text, _, schedule_text = text.strip().partition(":")
    try:
        ranks = (
            None
            if ranks_text in ("all", "")
            else tuple(sorted({int(rank) for rank in ranks_text.split(",")}))
        )
        numbers = [int(part) for part in schedule_text.split(",")] if schedule_text else []
    except ValueError:
        raise ScaletrainError(
            f"--profile {text!r} is not RANKS[:WAIT,WARMUP,ACTIVE].", _HINT
        ) from None
    if ranks is not None and any(rank < 0 for rank in ranks):
        raise ScaletrainError(f"--profile {text!r} names a negative rank.", _HINT)
    if numbers and len(numbers) != 3:
        raise ScaletrainError(f"--profile {text!r} needs three schedule numbers.", _HINT)
    schedule = dict(zip(("wait", "warmup", "active"), numbers, strict=False))
    return ProfileSpec(ranks=ranks, **schedule)


def profile_from(environ: Mapping[str, str]) -> ProfileSpec | None:
    text = environ.get(PROFILE, "")
    return parse_profile(text) if text else None
