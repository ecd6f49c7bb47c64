"""A rehearsal's report (`scaletrain submit --rehearse`, read by `scaletrain status`): step
time, samples/s, peak memory against the device's, and the real job's predicted duration
against its --time, with a one-line suggestion.

The prediction: the rehearsal's start-up, then the run's remaining steps at the rehearsal's
step time, times rehearsal GPUs ÷ real GPUs (perfect scaling: with a global batch the steps
get shorter, with a batch per GPU they get fewer; the same factor either way), divided by the
efficiency a `scaletrain scale` study of the run measured between the two sizes when the run
folder holds one (report/scaling.json), and a final save. No torch here.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core.progress_line import format_duration
from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.scaling.fit import Fit

# Ask for this much more than the prediction: steps vary between nodes and over a run.
TIME_MARGIN = 0.15
# A --time more than this many times what is needed is far too long: it waits longer.
FAR_TOO_LONG = 2.0
# Peak memory above this share of the device's leaves little room for longer batches.
MEMORY_WARNING_SHARE = 0.9


@dataclass(frozen=True, kw_only=True, slots=True)
class RehearsalReport:
    """What a rehearsal measured (metrics/rehearsal.json of its run folder)."""

    world_size: int
    steps: int
    """Steps before the save and resume, and after it."""
    step_s: float | None
    """Median time of a step, without the first and the one across the save and resume."""
    timed_steps: int
    samples_per_step: int | None
    start_s: float | None
    """From the job's start to the end of its first step: software, checks, start-up."""
    save_s: float | None
    load_s: float | None
    weights_came_back: bool | None
    peak_memory_gb: float
    """The largest peak of any process."""
    total_steps: int | None
    """Steps of the whole run (epochs × batches per epoch), as the rehearsal saw them."""

    @property
    def samples_per_s(self) -> float | None:
        if self.samples_per_step is None or not self.step_s:
            return None
        return self.samples_per_step / self.step_s


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    seconds: float
    arithmetic: str
    """How it was reached, e.g. `start-up 0:00:36 + 47 steps × 0.52 s × 2/16 GPUs + a save`."""
    scaling: str
    """Where the scaling from the rehearsal's size to the real one comes from."""


def read_rehearsal_report(folder: RunFolder) -> RehearsalReport | None:
    """The report a rehearsal's rank 0 wrote when it stopped, or None (none, or unreadable)."""
    try:
        data = json.loads(folder.rehearsal_report.read_text(encoding="utf-8"))
        return _report(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _report(data: dict[str, Any]) -> RehearsalReport:
    steps, ends = int(data["steps"]), [float(end) for end in data["step_ends"]]
    intervals = [later - earlier for earlier, later in itertools.pairwise(ends)]
    # Not the first (warm-up) nor the one across the save and resume (index steps - 1).
    steady = [t for index, t in enumerate(intervals) if index not in (0, steps - 1)]
    steady = steady or [t for index, t in enumerate(intervals) if index != steps - 1]
    started = data.get("job_started")
    return RehearsalReport(
        world_size=int(data["world_size"]),
        steps=steps,
        step_s=statistics.median(steady) if steady else None,
        timed_steps=len(steady),
        samples_per_step=data.get("samples_per_step"),
        start_s=ends[0] - float(started) if started is not None and ends else None,
        save_s=data.get("save_s"),
        load_s=data.get("load_s"),
        weights_came_back=data.get("weights_came_back"),
        peak_memory_gb=max(data.get("peak_memory_gb") or [0.0]),
        total_steps=data.get("total_steps"),
    )


def predict(
    report: RehearsalReport, world_size: int, scaling_study: Path | None = None
) -> Prediction | None:
    """The real job's duration on `world_size` GPUs, or None when the rehearsal did not
    measure its steps or the run's length."""
    if report.step_s is None or report.total_steps is None:
        return None
    factor = report.world_size / world_size
    ratio = _study_ratio(scaling_study, report.world_size, world_size) if scaling_study else None
    if world_size == report.world_size:
        scaling = "the rehearsal's own size"
    elif ratio is not None:
        factor /= ratio
        scaling = (
            f"scaling from {report.world_size} to {world_size} GPUs at {ratio:.0%} of perfect, "
            f"from the study {scaling_study}"
        )
    else:
        scaling = f"assuming perfect scaling from {report.world_size} to {world_size} GPUs"
    steps = report.total_steps - 1  # the first step is part of the start-up
    start, save = report.start_s or 0.0, report.save_s or 0.0
    seconds = start + steps * report.step_s * factor + save
    shown = f"{steps} steps × {report.step_s:.3g} s"
    if factor != 1:
        shown += f" × {factor:.3g}"
    parts = [f"start-up {format_duration(start)}"] if report.start_s is not None else []
    parts += [shown, f"a save {save:.3g} s"] if save else [shown]
    return Prediction(seconds=seconds, arithmetic=" + ".join(parts), scaling=scaling)


def _study_ratio(path: Path, rehearsal_size: int, real_size: int) -> float | None:
    """Efficiency at `real_size` processes over that at `rehearsal_size`, from a scaling
    study's fit (report/scaling.json); None when there is none to read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        row = data["rows"][0]
        per_unit = row["processes"] / row["size"]  # processes per node on Slurm, else 1
        fit = Fit(
            weak=bool(data["fit"]["weak"]),
            compute=tuple(data["fit"]["compute"]),
            communication=tuple(data["fit"]["communication"]),
            other=float(data["fit"]["other"]),
        )
        return _efficiency(fit, real_size / per_unit) / _efficiency(fit, rehearsal_size / per_unit)
    except (OSError, ValueError, KeyError, TypeError, IndexError, ZeroDivisionError):
        return None


def _efficiency(fit: Fit, size: float) -> float:
    """Speed-up per unit of size against one unit: strong scaling does the same work in each
    step, weak scaling `size` times as much."""
    work = size if fit.weak else 1.0
    return fit.step_s(1.0) / fit.step_s(size) * work / size


def time_advice(predicted_s: float, time_limit_s: int) -> str:
    """One line: whether --time fits the prediction, and what to ask for when it does not."""
    need = math.ceil(predicted_s * (1 + TIME_MARGIN) / 60) * 60
    asked, predicted = format_slurm_time(time_limit_s), format_slurm_time(round(predicted_s))
    why = f"(predicted {predicted} + {TIME_MARGIN:.0%})"
    if need > time_limit_s:
        return f"--time {asked} is too short: ask for {format_slurm_time(need)} {why}"
    if time_limit_s > FAR_TOO_LONG * need:
        return (
            f"--time {asked} is far too long: ask for {format_slurm_time(need)} {why}; "
            "shorter jobs start sooner"
        )
    return f"--time {asked} fits (predicted {predicted})"


def memory_line(report: RehearsalReport, device_memory_gb: float | None) -> str:
    """Peak memory of the busiest process against its device's."""
    peak = f"peak {report.peak_memory_gb:.3g} GB per process"
    if device_memory_gb is None:
        return f"{peak} (CPU processes: resident memory, no device to compare with)"
    share = report.peak_memory_gb / device_memory_gb
    line = f"{peak} of {device_memory_gb:g} GB per GPU ({share:.0%})"
    if share > MEMORY_WARNING_SHARE:
        line += ": little room left; a longer batch or sequence may run out"
    return line
