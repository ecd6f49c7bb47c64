"""A run's cost in words (`scaletrain cost`, and `status` once the job has ended): the one-line
summary, the rows of its table, one row per attempt; units to three significant digits."""

from __future__ import annotations

from datetime import datetime, timezone

from scaletrain.core import console
from scaletrain.core.progress_line import format_duration
from scaletrain.observe.cost.energy import JOULES_PER_KWH
from scaletrain.observe.cost.report import NOT_REPORTED, RunCost

# Columns of `attempt_rows`, and those of them that hold numbers.
ATTEMPT_COLUMNS = ("job", "state", "started", "billed", "units", "steps", "lost")
ATTEMPT_NUMBERS = ("billed", "units", "lost")


def summary(found: RunCost) -> str:
    """One line: units used of planned, and lost (seconds where nothing is billed)."""
    so_far = "" if found.finished else " so far"
    lost = found.lost_s
    lost_text = "lost unknown" if lost is None else f"{_amount(found, lost)} lost"
    if found.unit is None:
        return f"{format_duration(found.used_s)} of allocation{so_far}, {lost_text}"
    used = units_text(found.units(found.used_s))
    planned = found.planned_units
    of_plan = f" of {units_text(planned)} planned" if planned else ""
    return f"{used} {found.unit} used{so_far}{of_plan}, {lost_text}"


def cost_rows(found: RunCost) -> list[tuple[str, console.Piece]]:
    """The run's rate, plan, use, loss, steps and energy, as label and text."""
    count = len(found.attempts)
    rows: list[tuple[str, console.Piece]] = []
    if found.unit is None:
        rows.append(("billing", "the cluster profile bills nothing: times only"))
    else:
        rows += [
            ("rate", f"{units_text(found.units_per_hour)} {found.unit} per hour (plan.toml)"),
            (
                "planned",
                f"{units_text(found.planned_units)} {found.unit} for "
                f"{format_duration(found.time_limit_s)} (the time limit, once)",
            ),
        ]
    rows.append(
        ("used", f"{_amount(found, found.used_s)} over {count} attempt{'s' * (count != 1)}")
    )
    lost = found.lost_s
    rows.append(
        (
            "lost",
            "unknown: the script reports no steps (st.Progress)"
            if lost is None
            else f"{_amount(found, lost)}: work not kept after crashes, hangs and requeues",
        )
    )
    if found.steps is not None:
        epoch = f", {found.steps_per_epoch:g} per epoch" if found.steps_per_epoch else ""
        rows.append(("steps", f"{found.steps:,}{epoch}"))
    per_1000 = found.per_steps(1000)
    if per_1000 is not None:
        rows.append(("per 1,000 steps", _amount(found, per_1000)))
    per_epoch = found.per_steps(found.steps_per_epoch)
    if per_epoch is not None:
        rows.append(("per epoch", _amount(found, per_epoch)))
    rows += _energy_rows(found)
    return rows


def _energy_rows(found: RunCost) -> list[tuple[str, console.Piece]]:
    site = found.site_energy_joules
    rows: list[tuple[str, console.Piece]] = [
        ("energy", f"{site / JOULES_PER_KWH:.3g} kWh (sacct)" if site else NOT_REPORTED)
    ]
    gpus = found.gpus
    if gpus is None:
        rows.append(("GPU power", "no GPU samples (scaletrain monitor)"))
        return rows
    if gpus.energy_joules is None:
        rows.append(("GPU power", "no power readings in the monitor's samples"))
    else:
        per_step = f", {gpus.energy_joules / found.steps:,.0f} J per step" if found.steps else ""
        rows.append(("GPU energy", f"{gpus.energy_joules / JOULES_PER_KWH:.3g} kWh{per_step}"))
    share = gpus.idle_gpu_s / gpus.sampled_gpu_s if gpus.sampled_gpu_s else 0.0
    rows.append(
        (
            "idle GPUs",
            f"{gpus.idle_gpu_s / 3600:.3g} of {gpus.sampled_gpu_s / 3600:.3g} GPU-hours "
            f"({share:.0%}) below the monitor's idle threshold",
        )
    )
    return rows


def attempt_rows(found: RunCost) -> list[tuple[str, ...]]:
    """One row per attempt: job, state, start, billed time, units, steps, lost."""
    rows: list[tuple[str, ...]] = []
    for attempt in found.attempts:
        steps = f"{attempt.from_step}→{attempt.to_step}" if attempt.to_step is not None else "none"
        if attempt.starts > 1:
            steps += f" ({attempt.starts} starts)"
        rows.append(
            (
                attempt.job_id,
                attempt.state,
                _clock(attempt.start),
                format_duration(attempt.elapsed_s),
                units_text(found.units(attempt.elapsed_s)),
                steps,
                _lost(found, attempt.lost_s),
            )
        )
    return rows


def _amount(found: RunCost, seconds: float) -> str:
    """Units and allocation time: `1.23 GPU-hours (0:36:54)`; the time alone without billing."""
    units = found.units(seconds)
    if units is None:
        return _time(seconds)
    return f"{units_text(units)} {found.unit} ({_time(seconds)})"


def _lost(found: RunCost, seconds: float | None) -> str:
    """An attempt's lost work: units where the site bills, else the time."""
    if seconds is None:
        return "-"
    return units_text(found.units(seconds)) if found.unit else _time(seconds)


def _time(seconds: float) -> str:
    return format_duration(seconds) if seconds >= 1 or seconds == 0 else f"{seconds:.1f} s"


def units_text(value: float | None) -> str:
    """Three significant digits, whole numbers from 100 on."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _clock(moment: float | None) -> str:
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
