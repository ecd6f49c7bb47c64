"""The scaling study's model: step(N) = compute(N) + communication(N) + other, fitted to
the measured sizes by least squares (times never negative), to predict larger sizes."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaletrain.observe.scaling.study import Point


@dataclass(frozen=True, kw_only=True, slots=True)
class Fit:
    """step(N) = compute(N) + communication(N) + other.

    compute: strong a/N + b (the work splits), weak a + b·log2(N) (it does not; b > 0 where
    processes slow each other: shared cores, memory bandwidth, a power cap);
    communication: c·(N-1)/N + d·log2(N): a ring all-reduce moves 2(N-1)/N of the
    gradients per rank, and its latency grows with the number of hops; none at N = 1;
    other (data loading, launches, idle): the mean over the measured sizes.
    """

    weak: bool
    compute: tuple[float, float]
    communication: tuple[float, float]
    other: float

    def compute_s(self, size: float) -> float:
        a, b = self.compute
        return a + b * math.log2(size) if self.weak else a / size + b

    def communication_s(self, size: float) -> float:
        c, d = self.communication
        return c * (size - 1) / size + d * math.log2(size)

    def step_s(self, size: float) -> float:
        return self.compute_s(size) + self.communication_s(size) + self.other


def _least_squares(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float]:
    """y ≈ p·x0 + q·x1 with p, q >= 0 (a time cannot shrink below zero), least squares:
    both terms where the normal equations give non-negative values, else the better of
    each term alone."""
    s00 = sum(x0 * x0 for x0, _ in xs)
    s01 = sum(x0 * x1 for x0, x1 in xs)
    s11 = sum(x1 * x1 for _, x1 in xs)
    t0 = sum(x0 * y for (x0, _), y in zip(xs, ys, strict=True))
    t1 = sum(x1 * y for (_, x1), y in zip(xs, ys, strict=True))
    determinant = s00 * s11 - s01 * s01
    if abs(determinant) > 1e-12 * max(s00 * s11, 1e-300):
        p, q = (t0 * s11 - t1 * s01) / determinant, (s00 * t1 - s01 * t0) / determinant
        if p >= 0 and q >= 0:
            return p, q
    candidates = [
        (max(t0 / s00, 0.0) if s00 else 0.0, 0.0),
        (0.0, max(t1 / s11, 0.0) if s11 else 0.0),
    ]

    def squared_error(params: tuple[float, float]) -> float:
        return sum(
            (params[0] * x0 + params[1] * x1 - y) ** 2 for (x0, x1), y in zip(xs, ys, strict=True)
        )

    return min(candidates, key=squared_error)


def fit(points: Sequence[Point], weak: bool) -> Fit:
    sizes = [float(p.size) for p in points]
    columns = [(1.0, math.log2(n)) if weak else (1 / n, 1.0) for n in sizes]
    compute = _least_squares(columns, [p.compute_s for p in points])
    communication = _least_squares(
        [((n - 1) / n, math.log2(n)) for n in sizes], [p.communication_s for p in points]
    )
    return Fit(
        weak=weak,
        compute=compute,
        communication=communication,
        other=statistics.fmean(p.other_s for p in points),
    )
