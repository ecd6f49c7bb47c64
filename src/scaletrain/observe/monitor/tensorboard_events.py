"""Monitor samples as TensorBoard scalars (`tensorboard --logdir runs/<name>/metrics/tensorboard`).

Uses the tensorboard package's own event-file writer and protobufs, so no torch or TensorFlow
is needed; where tensorboard is not installed the sampler writes JSON lines only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from scaletrain.observe.monitor.samples import Sample

_GB = 1e9


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def scalars(sample: Sample) -> dict[str, float]:
    """The numbers of one sample, by TensorBoard tag (grouped by node, GPU and rank)."""
    values = {
        f"{sample.host}/cpu_percent": sample.cpu_percent,
        f"{sample.host}/memory_used_gb": sample.memory_used_bytes / _GB,
    }
    for gpu in sample.gpus:
        prefix = f"{sample.host}/gpu{gpu.index}"
        for name, value in (
            ("utilization_percent", gpu.utilization_percent),
            ("memory_used_gb", _gigabytes(gpu.memory_used_bytes)),
            ("power_watts", gpu.power_watts),
        ):
            if value is not None:
                values[f"{prefix}/{name}"] = value
    for rank in sample.ranks:
        values[f"rank{rank.rank}/cpu_percent"] = rank.cpu_percent
        values[f"rank{rank.rank}/memory_rss_gb"] = rank.rss_bytes / _GB
    return values


class TensorBoardWriter:
    """Appends one event per sample and tag to an event file in `folder`."""

    def __init__(self, folder: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        folder.mkdir(parents=True, exist_ok=True)
        self._writer: Any = EventFileWriter(str(folder))
        self._step = 0

    def add(self, sample: Sample) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [
            Summary.Value(tag=tag, simple_value=value) for tag, value in scalars(sample).items()
        ]
        event = Event(wall_time=sample.time, step=self._step, summary=Summary(value=values))
        self._writer.add_event(event)
        self._writer.flush()
        self._step += 1

    def close(self) -> None:
        self._writer.close()


def _gigabytes(value: int | None) -> float | None:
    return None if value is None else value / _GB
