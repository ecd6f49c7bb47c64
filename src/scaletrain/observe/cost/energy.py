"""Energy and idle GPUs from the monitor's samples (metrics/monitor-<host>.jsonl).

Each GPU's power is read at every sample; between two samples it is taken as the mean of the
two readings (the trapezoid rule). A GPU's utilisation is the share of the period before its
sample in which it ran a kernel, so a period counts as idle when the sample that ends it is
below the monitor's idle threshold. A period longer than a few sampling intervals is a gap
(between two attempts the sampler does not run) and counts for neither.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from scaletrain.observe.monitor.samples import GpuSample, Sample
from scaletrain.observe.monitor.usage import IDLE_GPU_PERCENT

# A period longer than this many median sampling intervals is a gap in the samples.
GAP_INTERVALS = 5.0
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuTime:
    """What the samples say about the GPUs of a run, summed over nodes and GPUs."""

    sampled_gpu_s: float
    """GPU-seconds covered by samples."""
    idle_gpu_s: float
    """GPU-seconds below IDLE_GPU_PERCENT busy."""
    energy_joules: float | None
    """None when no sample reads power."""


def gpu_time(samples_by_host: Mapping[str, Sequence[Sample]]) -> GpuTime | None:
    """GPU time, idle time and energy over every node's samples; None without GPU samples."""
    sampled = idle = energy = 0.0
    has_gpus = has_power = False
    for samples in samples_by_host.values():
        for seconds, before, after in _periods(samples):
            has_gpus = True
            sampled += seconds
            busy = after.utilization_percent
            if busy is not None and busy < IDLE_GPU_PERCENT:
                idle += seconds
            if before.power_watts is not None and after.power_watts is not None:
                has_power = True
                energy += seconds * (before.power_watts + after.power_watts) / 2
    if not has_gpus:
        return None
    return GpuTime(
        sampled_gpu_s=sampled, idle_gpu_s=idle, energy_joules=energy if has_power else None
    )


def _periods(samples: Sequence[Sample]) -> Iterator[tuple[float, GpuSample, GpuSample]]:
    """(seconds, reading at its start, reading at its end) for each GPU and sampling period,
    gaps left out."""
    pairs = list(pairwise(samples))
    positive = [after.time - before.time for before, after in pairs if after.time > before.time]
    if not positive:
        return
    longest = GAP_INTERVALS * statistics.median(positive)
    for before, after in pairs:
        seconds = after.time - before.time
        if not 0 < seconds <= longest:
            continue
        readings = {gpu.index: gpu for gpu in before.gpus}
        for gpu in after.gpus:
            if gpu.index in readings:
                yield seconds, readings[gpu.index], gpu
