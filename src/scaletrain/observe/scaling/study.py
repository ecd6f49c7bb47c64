"""A scaling study: the same script for a fixed number of steps at 1, 2, 4, ... processes
(or nodes), strong or weak; throughput, speed-up and efficiency, measured and predicted by
the fit (fit.py), with the fit's error on the measured sizes.

Each size runs through the instrumented entry: the first `warmup` steps are skipped, the
next `timed` steps are timed (no profiler on), then every rank is profiled for `profiled`
steps, whose traces split the step into compute, exposed communication and the rest.
No torch here: this module plans the study and reads what the runs left.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import PROFILE, STOP_AFTER_STEPS
from scaletrain.observe.analysis.analyze import analyze_traces
from scaletrain.observe.profile.spec import ProfileSpec
from scaletrain.observe.profile.step_clock_files import read_step_ends
from scaletrain.observe.scaling.fit import Fit, fit

BATCH_PLACEHOLDER = "{batch}"


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyDesign:
    """What the study runs: sizes, strong or weak scaling, steps, the batch."""

    sizes: tuple[int, ...]
    weak: bool = False
    """Weak: the work per process stays the same (the global batch grows with the size)."""
    batch: int | None = None
    """Strong: the global batch; weak: the batch per process (per node on Slurm: per unit of
    size). Replaces {batch} in the script's arguments; throughput is then in samples/s."""
    warmup: int = 5
    timed: int = 20
    profiled: int = 3

    def __post_init__(self) -> None:
        if not self.sizes or any(size < 1 for size in self.sizes):
            raise ScaletrainError(
                f"--sizes {','.join(map(str, self.sizes))} is not a list of positive sizes.",
                "give sizes such as --sizes 1,2,4.",
            )
        if self.timed < 2 or self.warmup < 0 or self.profiled < 1:
            raise ScaletrainError(
                "A study needs at least 2 timed steps and 1 profiled step.",
                "use e.g. --steps 20 (timed) with the default warm-up and profile.",
            )

    @property
    def total_steps(self) -> int:
        # + 1: the profiler's own warm-up step
        return self.warmup + self.timed + 1 + self.profiled

    def batch_for(self, size: int) -> int | None:
        if self.batch is None:
            return None
        return self.batch * size if self.weak else self.batch

    def script_args(self, args: Sequence[str], size: int) -> tuple[str, ...]:
        batch = self.batch_for(size)
        if batch is None:
            if any(BATCH_PLACEHOLDER in arg for arg in args):
                raise ScaletrainError(
                    "The script's arguments name {batch} but the study has no --batch.",
                    "add --batch N (the global batch for strong scaling, the batch per "
                    "process for --weak).",
                )
            return tuple(args)
        return tuple(arg.replace(BATCH_PLACEHOLDER, str(batch)) for arg in args)

    def variables(self) -> dict[str, str]:
        """What the instrumented entry reads: where to stop and what to profile."""
        profile = ProfileSpec(wait=self.warmup + self.timed, warmup=1, active=self.profiled)
        return {STOP_AFTER_STEPS: str(self.total_steps), PROFILE: profile.to_text()}


def parse_sizes(text: str) -> tuple[int, ...]:
    """`--sizes 1,2,4`: the sizes to measure, smallest first, each once."""
    try:
        return tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ScaletrainError(
            f"--sizes {text!r} is not a comma-separated list of numbers.",
            "give sizes such as --sizes 1,2,4.",
        ) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One measured size."""

    size: int
    processes: int
    step_s: float
    """Median time of the timed steps (slowest rank)."""
    samples_per_step: int | None
    compute_s: float
    """Share of the profiled step spent computing (mean over ranks), times step_s."""
    communication_s: float
    """Exposed (not overlapped) communication, the same way."""

    @property
    def other_s(self) -> float:
        return self.step_s - self.compute_s - self.communication_s

    @property
    def throughput(self) -> float:
        """Samples/s, or steps/s when the batch is not known."""
        return (self.samples_per_step or 1) / self.step_s


def measure(folder: RunFolder, size: int, design: StudyDesign) -> Point:
    """One size's point from its run folder: step times and the profile's breakdown."""
    step_ends = read_step_ends(folder.metrics)
    if not step_ends:
        raise ScaletrainError(
            f"The run {folder.root} recorded no step times.",
            f"see its logs in {folder.logs}/: did the script reach "
            f"{design.total_steps} optimizer steps?",
        )
    timed = []
    for ends in step_ends.values():
        window = ends[design.warmup : design.warmup + design.timed + 1]
        if len(window) < 2:
            raise ScaletrainError(
                f"The run {folder.root} ended after {len(ends)} steps, before the "
                f"{design.warmup + design.timed} the study times.",
                "give the script enough data and epochs for --steps plus warm-up, or "
                "fewer --steps.",
            )
        timed.append(statistics.median(b - a for a, b in itertools.pairwise(window)))
    step_s = max(timed)
    breakdowns = analyze_traces(folder.traces).breakdowns
    compute = statistics.fmean(b.compute_us / b.span_us for b in breakdowns if b.span_us)
    exposed = statistics.fmean(
        b.exposed_communication_us / b.span_us for b in breakdowns if b.span_us
    )
    return Point(
        size=size,
        processes=len(step_ends),
        step_s=step_s,
        samples_per_step=design.batch_for(size),
        compute_s=compute * step_s,
        communication_s=exposed * step_s,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    size: int
    processes: int
    step_s: float
    throughput: float
    speedup: float
    efficiency: float
    predicted: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Study:
    design: StudyDesign
    unit: str
    """'process' (local) or 'node' (Slurm)."""
    processes_per_unit: int
    points: tuple[Point, ...]
    fit: Fit
    predicted_sizes: tuple[int, ...]

    def rows(self) -> list[Row]:
        """Measured sizes, then predictions; speed-up and efficiency against the smallest."""
        base = self.points[0]
        rows = []
        for point in self.points:
            rows.append(self._row(point.size, point.processes, point.step_s, base, False))
        for size in self.predicted_sizes:
            step = self.fit.step_s(size)
            rows.append(self._row(size, size * self.processes_per_unit, step, base, True))
        return rows

    def _row(self, size: int, processes: int, step_s: float, base: Point, predicted: bool) -> Row:
        batch = self.design.batch_for(size)
        throughput = (batch or 1) / step_s
        # Without a batch, weak scaling does `size` times the work per step.
        if batch is None and self.design.weak:
            throughput *= size
        base_throughput = (base.samples_per_step or 1) / base.step_s
        if base.samples_per_step is None and self.design.weak:
            base_throughput *= base.size
        speedup = throughput / base_throughput
        return Row(
            size=size,
            processes=processes,
            step_s=step_s,
            throughput=throughput,
            speedup=speedup,
            efficiency=speedup / (size / base.size),
            predicted=predicted,
        )

    def fit_errors(self) -> list[float]:
        """Relative error of the fitted step time at each measured size."""
        return [abs(self.fit.step_s(p.size) - p.step_s) / p.step_s for p in self.points]

    def to_json(self) -> str:
        return json.dumps(
            {
                "weak": self.design.weak,
                "unit": self.unit,
                "points": [
                    {**vars_of(p), "other_s": p.other_s, "throughput": p.throughput}
                    for p in self.points
                ],
                "rows": [vars_of(row) for row in self.rows()],
                "fit": vars_of(self.fit),
                "fit_errors": self.fit_errors(),
            },
            indent=2,
        )


def vars_of(value: Point | Row | Fit) -> dict[str, object]:
    return asdict(value)


def predicted_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """Two, four and eight times the largest measured size."""
    largest = max(sizes)
    return (largest * 2, largest * 4, largest * 8)


def fitted_study(
    design: StudyDesign, unit: str, processes_per_unit: int, points: Sequence[Point]
) -> Study:
    """The study of the measured points, with its fit and the sizes it predicts."""
    return Study(
        design=design,
        unit=unit,
        processes_per_unit=processes_per_unit,
        points=tuple(points),
        fit=fit(points, design.weak),
        predicted_sizes=predicted_sizes(design.sizes),
    )


def save_study(study: Study, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(study.to_json() + "\n", encoding="utf-8")
