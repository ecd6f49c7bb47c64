"""Slurm's runs of a job (attempts) and the part of each whose work was lost.

An attempt is one run of the job's allocation as accounting keeps it (`sacct --duplicates`):
the first, and one after each requeue. Its billed time is Slurm's elapsed time. Inside it, the
training processes may start more than once (torchrun's restarts after a crash); each start
(history.py) covers its share of the attempt: the first from the attempt's start, each later
one from its own beginning, the last up to the attempt's end.

The work of a start is kept up to the step that training later went on from: the step the
next start resumed from, or, after the run's last start, the newest checkpoint (a run that
completed, or still runs, keeps all of its last start's work). A start's lost time is its
share after it reached that step: repeated steps, a hang until the watchdog ended it, the
restart. A start that never passed the step it began from is lost whole, start-up included,
and so is an attempt that reported no step at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scaletrain.observe.cost.history import TrainingStart
from scaletrain.slurm.output import AccountedRun

# Slurm's times are whole seconds, training's are not: a start this close to an attempt's
# bounds belongs to it.
_BOUNDS_SLACK_S = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One run of the allocation: what Slurm billed and what of it was lost."""

    job_id: str
    state: str
    start: float | None
    end: float | None
    elapsed_s: int
    starts: int
    """Starts of the training processes in it (1 + the restarts after a crash)."""
    from_step: int | None
    """The step its first start began from; None if it reported no step."""
    to_step: int | None
    """The last step it reported."""
    lost_s: float | None
    """Billed seconds whose work was not kept; None when nothing says (no steps reported)."""
    energy_joules: int | None


def attempts(
    runs: Sequence[AccountedRun],
    starts: Sequence[TrainingStart],
    *,
    resumed_from: int | None,
) -> list[Attempt]:
    """Each run of the job with its lost time.

    `resumed_from`: where the training would go on after the last start, the newest
    checkpoint's step (0: none); None when the last start kept all its work (the run
    completed, or still runs).
    """
    # Each start's kept step; None: all of its work is kept.
    kept: list[int | None] = [start.from_step for start in starts[1:]]
    if starts:
        kept.append(resumed_from)
    result = []
    for run in runs:
        inside = [
            (start, kept_step)
            for start, kept_step in zip(starts, kept, strict=True)
            if run.start is not None and _within(start.begin, run)
        ]
        result.append(
            Attempt(
                job_id=run.job_id,
                state=run.state,
                start=run.start,
                end=run.end,
                elapsed_s=run.elapsed_s,
                starts=len(inside),
                from_step=inside[0][0].from_step if inside else None,
                to_step=max(start.last_step for start, _ in inside) if inside else None,
                lost_s=_lost(run, inside) if starts else None,
                energy_joules=run.energy_joules,
            )
        )
    return result


def _within(moment: float, run: AccountedRun) -> bool:
    assert run.start is not None
    end = run.end if run.end is not None else run.start + run.elapsed_s
    return run.start - _BOUNDS_SLACK_S <= moment <= end + _BOUNDS_SLACK_S


def _lost(run: AccountedRun, inside: Sequence[tuple[TrainingStart, int | None]]) -> float:
    """Billed seconds of one run after each of its starts reached its kept step."""
    if run.start is None:
        return 0.0
    if not inside:
        # Trained no step: lost whole, unless it is still starting.
        return 0.0 if run.end is None else float(run.elapsed_s)
    end = run.end if run.end is not None else run.start + run.elapsed_s
    bounds = [run.start, *(start.begin for start, _ in inside[1:]), end]
    lost = 0.0
    for (start, kept_step), begin, until in zip(inside, bounds, bounds[1:], strict=False):
        if kept_step is None:
            continue
        if kept_step <= start.from_step:
            lost += until - begin
        else:
            lost += until - min(max(start.time_at(kept_step), begin), until)
    return min(max(lost, 0.0), float(run.elapsed_s))
