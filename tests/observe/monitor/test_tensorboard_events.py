"""Monitor samples as TensorBoard scalars: the tags a user finds grouped by node, GPU and
rank, and the event files TensorBoard itself reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.observe.monitor.samples import GpuSample, RankSample, Sample
from scaletrain.observe.monitor.tensorboard_events import TensorBoardWriter, scalars

GB = 10**9


def sample(time: float, cpu: float) -> Sample:
    return Sample(
        time=time, host="n1", cpu_percent=cpu, memory_used_bytes=120 * GB,
        memory_total_bytes=512 * GB,
        gpus=(GpuSample(index=0, name="A100", utilization_percent=88.0,
                        memory_used_bytes=30 * GB, memory_total_bytes=40 * GB, power_watts=None),
              GpuSample(index=1, name="A100", utilization_percent=None, memory_used_bytes=None,
                        memory_total_bytes=None, power_watts=None)),
        ranks=(RankSample(rank=3, pid=1, cpu_percent=150.0, rss_bytes=5 * GB),),
    )  # fmt: skip


def test_the_tags_and_their_units() -> None:
    # Values a library did not report (None) are left out, not written as zero.
    assert scalars(sample(0.0, 40.0)) == {
        "n1/cpu_percent": 40.0,
        "n1/memory_used_gb": 120.0,
        "n1/gpu0/utilization_percent": 88.0,
        "n1/gpu0/memory_used_gb": 30.0,
        "rank3/cpu_percent": 150.0,
        "rank3/memory_rss_gb": 5.0,
    }


def test_tensorboard_reads_the_event_files(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    writer = TensorBoardWriter(tmp_path / "tensorboard" / "n1")
    for time, cpu in ((1000.0, 40.0), (1002.0, 60.0)):
        writer.add(sample(time, cpu))
    writer.close()
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard" / "n1"))
    events.Reload()
    assert "n1/gpu0/utilization_percent" in events.Tags()["scalars"]
    points = events.Scalars("n1/cpu_percent")
    read = [(point.step, point.wall_time, point.value) for point in points]
    assert read == [(0, 1000.0, 40.0), (1, 1002.0, 60.0)]
