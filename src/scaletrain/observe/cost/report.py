"""What one run cost: billed time and units against the plan, lost work, energy, idle GPUs,
per 1,000 steps and per epoch (`scaletrain cost`, and `status` once the job has ended).

Units are Slurm's billed seconds × the plan's units per hour: the site's rule from its
profile (clusters/billing.py) applied by `plan` to the allocation the job asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaletrain.checkpoint.layout import CheckpointStore, step_of
from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.cost.attempts import Attempt, attempts
from scaletrain.observe.cost.energy import JOULES_PER_KWH, GpuTime, gpu_time
from scaletrain.observe.cost.history import (
    read_resumes,
    read_step_records,
    steps_per_epoch,
    training_starts,
)
from scaletrain.observe.monitor.samples import read_run_samples
from scaletrain.observe.monitor.usage import IDLE_GPU_PERCENT
from scaletrain.planning.plan import Plan
from scaletrain.slurm.output import AccountedRun

_SECONDS_PER_HOUR = 3600.0
NOT_REPORTED = "not reported by this site"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCost:
    """Everything `scaletrain cost` shows of one run."""

    run: str
    unit: str | None
    """The site's billing unit; None where its profile bills nothing."""
    units_per_hour: float | None
    planned_units: float | None
    """What `plan` predicted: the whole time limit, billed once."""
    time_limit_s: int
    attempts: tuple[Attempt, ...]
    steps: int | None
    """The step the run has to show: its last (completed or running), else its newest
    checkpoint's; None when the script reports no steps."""
    steps_per_epoch: float | None
    gpus: GpuTime | None

    @property
    def used_s(self) -> int:
        return sum(attempt.elapsed_s for attempt in self.attempts)

    @property
    def lost_s(self) -> float | None:
        lost = [attempt.lost_s for attempt in self.attempts]
        return None if any(seconds is None for seconds in lost) else sum(filter(None, lost))

    @property
    def site_energy_joules(self) -> int | None:
        """sacct's ConsumedEnergy, summed; None unless every attempt has it."""
        energies = [attempt.energy_joules for attempt in self.attempts]
        return None if not energies or None in energies else sum(filter(None, energies))

    @property
    def finished(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].end is not None

    def units(self, seconds: float | None) -> float | None:
        """Billed seconds in the site's units."""
        if seconds is None or self.units_per_hour is None:
            return None
        return seconds / _SECONDS_PER_HOUR * self.units_per_hour

    def per_steps(self, steps: float | None) -> float | None:
        """Billed seconds per `steps` steps of the run, losses included."""
        if steps is None or not self.steps:
            return None
        return self.used_s / self.steps * steps

    def to_dict(self) -> dict[str, Any]:
        """Plain data for --json."""
        gpus = self.gpus
        gpu_energy = gpus.energy_joules if gpus else None
        per_1000 = self.per_steps(1000)
        per_epoch = self.per_steps(self.steps_per_epoch)
        return {
            "run": self.run,
            "unit": self.unit,
            "units_per_hour": self.units_per_hour,
            "planned": {"units": self.planned_units, "time_limit_s": self.time_limit_s},
            "used": {"units": self.units(self.used_s), "seconds": self.used_s},
            "lost": {"units": self.units(self.lost_s), "seconds": self.lost_s},
            "steps": self.steps,
            "steps_per_epoch": self.steps_per_epoch,
            "per_1000_steps": {"units": self.units(per_1000), "seconds": per_1000},
            "per_epoch": {"units": self.units(per_epoch), "seconds": per_epoch},
            "attempts": [
                {
                    "job_id": a.job_id,
                    "state": a.state,
                    "start": a.start,
                    "end": a.end,
                    "elapsed_s": a.elapsed_s,
                    "units": self.units(a.elapsed_s),
                    "lost_s": a.lost_s,
                    "lost_units": self.units(a.lost_s),
                    "from_step": a.from_step,
                    "to_step": a.to_step,
                    "starts": a.starts,
                    "energy_joules": a.energy_joules,
                }
                for a in self.attempts
            ],
            "energy": {
                "site_joules": self.site_energy_joules,
                "gpu_joules": gpu_energy,
                "gpu_kwh": gpu_energy / JOULES_PER_KWH if gpu_energy is not None else None,
                "gpu_joules_per_step": gpu_energy / self.steps
                if gpu_energy is not None and self.steps
                else None,
            },
            "gpus": {
                "sampled_gpu_hours": gpus.sampled_gpu_s / _SECONDS_PER_HOUR,
                "idle_gpu_hours": gpus.idle_gpu_s / _SECONDS_PER_HOUR,
                "idle_below_percent": IDLE_GPU_PERCENT,
            }
            if gpus
            else None,
        }


def run_cost(folder: RunFolder, plan: Plan, runs: Sequence[AccountedRun]) -> RunCost:
    """The cost of the run in `folder` from Slurm's runs of its jobs and what it wrote."""
    # A job cancelled while it waited never ran: Slurm billed it nothing.
    started = [r for r in runs if r.start is not None and (r.elapsed_s > 0 or r.end is None)]
    records = read_step_records(folder.metrics / "train.jsonl")
    starts = training_starts(records, read_resumes(folder.resumes))
    last = started[-1] if started else None
    keeps_all = last is None or last.end is None or last.state == "COMPLETED"
    resumed_from = None if keeps_all else _checkpoint_step(folder)
    if not starts:
        steps = None
    elif resumed_from is None:
        steps = starts[-1].last_step
    else:
        steps = resumed_from
    billing = plan.billing
    return RunCost(
        run=folder.name,
        unit=billing.unit if billing else None,
        units_per_hour=billing.units_per_hour if billing else None,
        planned_units=billing.total_units if billing else None,
        time_limit_s=plan.time_seconds,
        attempts=tuple(attempts(started, starts, resumed_from=resumed_from)),
        steps=steps,
        steps_per_epoch=steps_per_epoch(records),
        gpus=gpu_time(read_run_samples(folder.metrics)),
    )


def _checkpoint_step(folder: RunFolder) -> int:
    """The step a new start would resume from: the newest complete checkpoint's, else 0."""
    latest = CheckpointStore(folder.checkpoints).latest()
    return (step_of(latest) or 0) if latest is not None else 0
