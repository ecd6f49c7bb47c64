"""When periodic saves happen, and settings that could never work."""

from __future__ import annotations

import pytest

from scaletrain.checkpoint.schedule import SavePolicy
from scaletrain.core.errors import ScaletrainError


def test_every_n_steps() -> None:
    policy = SavePolicy(every_steps=50, every_minutes=None)
    assert [step for step in range(1, 201) if policy.due_by_steps(step)] == [50, 100, 150, 200]
    assert not policy.due_by_time(10**9)
    assert policy.reason(100) == "every 50 steps"


def test_every_t_minutes() -> None:
    policy = SavePolicy(every_minutes=30)
    assert not policy.due_by_steps(100)
    assert not policy.due_by_time(29 * 60 + 59)
    assert policy.due_by_time(30 * 60)
    assert policy.reason(7) == "every 30 minutes"


def test_steps_and_minutes_together() -> None:
    policy = SavePolicy(every_steps=1000, every_minutes=0.5)
    assert policy.due_by_steps(2000) and policy.due_by_time(31)
    assert policy.reason(2000) == "every 1000 steps"
    assert policy.reason(1999) == "every 0.5 minutes"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"every_steps": 0}, "every_steps=0 would never save"),
        ({"every_minutes": -1}, "every_minutes=-1 is not a time interval"),
        ({"keep": 0}, "keep=0 would delete every checkpoint"),
    ],
)
def test_impossible_settings_are_refused(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ScaletrainError, match=message):
        SavePolicy(**settings)  # type: ignore[arg-type]
