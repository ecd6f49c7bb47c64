"""How often the Checkpointer saves by default: as often as keeps saving at a small share of
the training time, from the measured time of the last save. No torch here: `plan` and
`submit` quote these bounds as what a failure costs.
"""

from __future__ import annotations

from typing import Literal

AUTO: Literal["auto"] = "auto"
SAVE_COST_FRACTION = 0.02
"""every_minutes="auto" saves as often as keeps saving at about this share of training time:
a save that stalls the loop 3 s comes every 150 s. What a node failure or a hang loses is
then roughly the save time / SAVE_COST_FRACTION."""
AUTO_MIN_INTERVAL_S = 60.0
"""Never more often than this (cheap saves of small models would churn the file system); also
when the first save comes, before any save was measured."""
AUTO_MAX_INTERVAL_S = 30 * 60.0
"""Never less often than this, however long a save takes."""


def auto_interval(save_seconds: float | None) -> float:
    """Seconds between saves that cost SAVE_COST_FRACTION of training, within the bounds."""
    if save_seconds is None:
        return AUTO_MIN_INTERVAL_S
    return min(AUTO_MAX_INTERVAL_S, max(AUTO_MIN_INTERVAL_S, save_seconds / SAVE_COST_FRACTION))
