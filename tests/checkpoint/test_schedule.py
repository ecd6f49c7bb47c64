"""When periodic saves happen, when ranks vote on saves and stops, and settings that could
never work."""

from __future__ import annotations

import itertools
import time

import pytest

from scaletrain.checkpoint.schedule import Ballot, SavePolicy, StepVote
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


@pytest.mark.parametrize("first_step", [0, 6208])
def test_votes_come_about_a_second_apart_from_any_first_step(first_step: int) -> None:
    """A resumed run starts counting at its checkpoint's step: its votes (stop requests,
    timed saves) must follow at the pace of its steps, as a fresh run's do, not 10,000
    steps later because the pace was measured from step 0."""
    vote = StepVote(None, 1, is_main=True)
    step_seconds = 0.005
    votes = []
    for step in range(first_step + 1, first_step + 301):  # 1.5 s of 5 ms steps
        time.sleep(step_seconds)
        vote.result(step)
        if vote.due(step):
            vote.start(step, Ballot())
            votes.append(step)
    # The first boundary votes; then about one per second (~200 steps), or more often on a
    # slow machine, where each step takes longer.
    assert votes[0] == first_step + 1 and len(votes) >= 2, votes
    assert max(later - earlier for earlier, later in itertools.pairwise(votes)) <= 400, votes
