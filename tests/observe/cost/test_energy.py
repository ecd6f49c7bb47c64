"""GPU energy and idle GPU time from the monitor's samples, written here as a GPU node's
sampler would write them (no GPU lends this machine power readings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.observe.cost.energy import JOULES_PER_KWH, gpu_time
from scaletrain.observe.monitor.samples import GpuSample, Sample, monitor_file, read_run_samples
from scaletrain.observe.monitor.usage import IDLE_GPU_PERCENT


def sample(time: float, *gpus: tuple[float | None, float | None], host: str = "n1") -> Sample:
    """One node's sample: (utilisation %, power W) for GPUs 0, 1, ..."""
    return Sample(
        time=time, host=host, cpu_percent=50.0, memory_used_bytes=1, memory_total_bytes=2,
        gpus=tuple(
            GpuSample(index=index, name="MI250X", utilization_percent=busy,
                      memory_used_bytes=None, memory_total_bytes=None, power_watts=watts)
            for index, (busy, watts) in enumerate(gpus)
        ),
    )  # fmt: skip


def test_energy_is_power_between_samples_and_idle_time_below_the_threshold() -> None:
    # GPU 0 busy at 300 W, then 500 W; GPU 1 idle (5% < 10%) at 100 W. Samples every 2 s.
    samples = [
        sample(0, (90, 300), (5, 100)),
        sample(2, (90, 300), (5, 100)),
        sample(4, (95, 500), (5, 100)),
    ]
    found = gpu_time({"n1": samples})
    assert found is not None
    # GPU 0: 2 s × 300 W + 2 s × (300 + 500) / 2 W = 1,400 J; GPU 1: 4 s × 100 W = 400 J.
    assert found.energy_joules == pytest.approx(1400 + 400)
    assert (found.sampled_gpu_s, found.idle_gpu_s) == (8, 4)
    assert IDLE_GPU_PERCENT == 10.0


def test_a_gap_between_attempts_counts_for_nothing() -> None:
    # The sampler ran 0-4 s in one attempt and 600-604 s in the next: the queue in between
    # is no GPU time.
    first = [sample(t, (90, 300)) for t in (0, 2, 4)]
    second = [sample(t, (0, 50)) for t in (600, 602, 604)]
    found = gpu_time({"n1": [*first, *second]})
    assert found is not None
    assert found.sampled_gpu_s == 8 and found.idle_gpu_s == 4
    assert found.energy_joules == pytest.approx(4 * 300 + 4 * 50)


def test_nodes_add_up_and_a_run_costs_kilowatt_hours(tmp_path: Path) -> None:
    # Two nodes of 8 GPUs at 400 W for an hour, sampled every 10 s, through the samples' files.
    for host in ("n1", "n2"):
        with monitor_file(tmp_path, host).open("w") as file:
            for t in range(0, 3601, 10):
                file.write(sample(t, *[(100.0, 400.0)] * 8, host=host).to_json() + "\n")
    found = gpu_time(read_run_samples(tmp_path))
    assert found is not None and found.energy_joules is not None
    assert found.energy_joules / JOULES_PER_KWH == pytest.approx(16 * 0.4)  # 6.4 kWh
    assert found.sampled_gpu_s == 16 * 3600 and found.idle_gpu_s == 0


def test_without_power_readings_or_gpus() -> None:
    no_power = gpu_time({"n1": [sample(0, (90, None)), sample(2, (5, None))]})
    assert no_power is not None and no_power.energy_joules is None
    assert no_power.idle_gpu_s == 2  # utilisation still counts
    assert gpu_time({"n1": [sample(0), sample(2)]}) is None  # CPU processes, as on the test Slurm
    assert gpu_time({}) is None
