"""What a hang or a lost node costs a planned job, for `plan` and `submit` to say up front.

Work since the newest checkpoint is redone after a restart; a hang also runs until the
watchdog's limit. Both bounds come from where they are decided: the Checkpointer's automatic
save interval (checkpoint/interval.py) and the hang limit (core/hang_report.py).
"""

from __future__ import annotations

from scaletrain.checkpoint.interval import (
    AUTO_MAX_INTERVAL_S,
    AUTO_MIN_INTERVAL_S,
    SAVE_COST_FRACTION,
)
from scaletrain.core.progress_line import format_duration
from scaletrain.planning.plan import Plan


def failure_cost(plan: Plan, hang_limit_s: float) -> str:
    """One line: the time (and billing) a hang or node failure loses at most."""
    lost = AUTO_MAX_INTERVAL_S + hang_limit_s
    checkpoints = (
        "the work since the last checkpoint (the Checkpointer saves every "
        f"{AUTO_MIN_INTERVAL_S / 60:g}-"
        f"{AUTO_MAX_INTERVAL_S / 60:g} min, as often as costs ~{SAVE_COST_FRACTION:.0%} of "
        "the time)"
    )
    watchdog = (
        f" + up to {format_duration(hang_limit_s)} until the watchdog ends a hang (--hang-limit)"
        if hang_limit_s
        else " + a hang runs until the collective's timeout (--hang-limit 0)"
    )
    text = f"a hang or a lost node costs {checkpoints}{watchdog}"
    if plan.billing is not None and hang_limit_s:
        units = plan.billing.units_per_hour * lost / 3600
        text += f": at most {format_duration(lost)} = {units:.3g} {plan.billing.unit}"
    return text + ", then the wait in the queue"
