"""Monitor samples: what one node's sampler records at each interval, as JSON lines.

One file per node, `metrics/monitor-<host>.jsonl` in the run folder; each line is a `Sample`.
Written by the sampler beside training, read by `scaletrain monitor` (no torch on either side).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MONITOR_FILE_PREFIX = "monitor-"


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSample:
    """One GPU (or one GCD of an MI250X) at one moment."""

    index: int
    name: str
    utilization_percent: float | None
    """Share of the last sample period in which a kernel ran (NVML) / GFX activity (AMD SMI)."""
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None
    pids: tuple[int, ...] = ()
    """Processes that hold memory on this GPU (where the library reports them)."""

    @property
    def memory_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSample:
    """One training process: its CPU use (with its DataLoader workers) and memory."""

    rank: int
    pid: int
    cpu_percent: float
    """100 = one core busy; the process and its children (DataLoader workers)."""
    rss_bytes: int
    gpu_index: int | None = None
    """The GPU this process holds memory on, where the library reports it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """Everything one node's sampler saw at one moment."""

    time: float
    """Seconds since the epoch."""
    host: str
    cpu_percent: float
    """Whole node, 0-100 (all cores)."""
    memory_used_bytes: int
    memory_total_bytes: int
    gpus: tuple[GpuSample, ...] = ()
    ranks: tuple[RankSample, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        return cls(
            time=data["time"],
            host=data["host"],
            cpu_percent=data["cpu_percent"],
            memory_used_bytes=data["memory_used_bytes"],
            memory_total_bytes=data["memory_total_bytes"],
            gpus=tuple(
                GpuSample(**{**gpu, "pids": tuple(gpu.get("pids", ()))})
                for gpu in data.get("gpus", ())
            ),
            ranks=tuple(RankSample(**rank) for rank in data.get("ranks", ())),
        )


def monitor_file(metrics: Path, host: str) -> Path:
    return metrics / f"{MONITOR_FILE_PREFIX}{host}.jsonl"


def monitor_files(metrics: Path) -> list[Path]:
    """Every node's sample file in a run's metrics folder, by host name."""
    return sorted(metrics.glob(f"{MONITOR_FILE_PREFIX}*.jsonl"))


def read_samples(path: Path) -> Iterator[Sample]:
    """The samples of one node's file; a line cut short by a killed sampler is skipped."""
    with path.open(encoding="utf-8") as file:
        for line in file:
            try:
                yield Sample.from_dict(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue


def last_sample(path: Path) -> Sample | None:
    """The newest complete sample of one node, reading only the end of the file."""
    with path.open("rb") as file:
        file.seek(0, 2)
        size = file.tell()
        file.seek(max(0, size - 65536))
        lines = file.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        try:
            return Sample.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return None


def read_run_samples(metrics: Path) -> dict[str, list[Sample]]:
    """Every node's samples of one run, by host."""
    by_host: dict[str, list[Sample]] = {}
    for path in monitor_files(metrics):
        samples = list(read_samples(path))
        if samples:
            by_host[samples[-1].host] = samples
    return by_host
