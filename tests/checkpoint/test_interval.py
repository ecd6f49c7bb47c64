"""How often the Checkpointer saves by default: from the measured time of a save."""

from __future__ import annotations

from scaletrain.checkpoint.interval import (
    AUTO_MAX_INTERVAL_S,
    AUTO_MIN_INTERVAL_S,
    SAVE_COST_FRACTION,
    auto_interval,
)
from scaletrain.checkpoint.schedule import SavePolicy


def test_saves_cost_a_small_share_of_the_time_within_bounds() -> None:
    assert auto_interval(None) == AUTO_MIN_INTERVAL_S  # the first save: measure early
    assert auto_interval(3.0) == 3.0 / SAVE_COST_FRACTION  # 150 s between 3 s saves
    assert auto_interval(0.01) == AUTO_MIN_INTERVAL_S  # a tiny model: not every second
    assert auto_interval(120.0) == AUTO_MAX_INTERVAL_S  # a huge one: still every 30 min


def test_the_default_policy_follows_the_last_save() -> None:
    policy = SavePolicy()
    assert not policy.due_by_time(59)
    assert policy.due_by_time(60)  # nothing measured yet
    assert not policy.due_by_time(149, save_seconds=3.0)
    assert policy.due_by_time(150, save_seconds=3.0)
    assert policy.reason(7, save_seconds=3.0) == "every 2.5 minutes (auto)"
    # Fixed intervals stay fixed whatever a save costs.
    assert SavePolicy(every_minutes=30).interval_s(save_seconds=3.0) == 1800
