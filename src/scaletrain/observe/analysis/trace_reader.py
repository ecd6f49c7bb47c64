"""Read a PyTorch profiler (Kineto) trace into the few columns the analysis needs.

Traces reach hundreds of MB per rank. Instead of loading the whole JSON document (Holistic
Trace Analysis needs ~6 GB of RAM for an 800 MB trace), events are decoded one at a time
from a small sliding buffer, and only kept as tuples of numbers and interned names:
memory grows with the events kept, not with the file. Plain `.json` and `.json.gz`.
"""

from __future__ import annotations

import gzip
import json
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.toml_text import parse_toml

_CHUNK = 4 * 1024 * 1024
_SEPARATORS = re.compile(r"[\s,]*")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)")

# Device event kinds (HTA's kernel types).
COMPUTE, COMMUNICATION, MEMORY, OTHER = "compute", "communication", "memory", "other"


@dataclass(frozen=True, slots=True)
class TraceNames:
    """The patterns of trace_names.toml, compiled."""

    device_categories: frozenset[str]
    device_communication: re.Pattern[str]
    device_memory: re.Pattern[str]
    device_not_compute: re.Pattern[str]
    step: re.Pattern[str]
    data_loading: re.Pattern[str]
    host_communication: re.Pattern[str]
    collective: re.Pattern[str]
    operator_categories: frozenset[str]
    annotation_categories: frozenset[str]

    def device_kind(self, name: str) -> str:
        """HTA's order: communication, then memory, then compute, else other."""
        if self.device_communication.match(name):
            return COMMUNICATION
        if self.device_memory.match(name):
            return MEMORY
        if not self.device_not_compute.match(name):
            return COMPUTE
        return OTHER


@cache
def trace_names() -> TraceNames:
    text = (files("scaletrain.observe.analysis") / "trace_names.toml").read_text("utf-8")
    table = parse_toml(text)
    device, host = table["device"], table["host"]
    return TraceNames(
        device_categories=frozenset(device["categories"]),
        device_communication=re.compile(device["communication"]),
        device_memory=re.compile(device["memory"]),
        device_not_compute=re.compile(device["not_compute"]),
        step=re.compile(host["step"]),
        data_loading=re.compile(host["data_loading"]),
        host_communication=re.compile(host["communication"]),
        collective=re.compile(host["collective"]),
        operator_categories=frozenset(host["operator_categories"]),
        annotation_categories=frozenset(host["annotation_categories"]),
    )


class Rows:
    """Events as four columns of machine numbers (28 bytes an event, not ~1 KB as a dict):
    start (µs), duration (µs), name id, and a number that depends on the rows (a
    correlation id for device events, a thread id for host events)."""

    __slots__ = ("duration", "extra", "name", "start")

    def __init__(self) -> None:
        self.start, self.duration = array("d"), array("d")
        self.name, self.extra = array("l"), array("q")

    def append(self, start: float, duration: float, name: int, extra: int) -> None:
        self.start.append(start)
        self.duration.append(duration)
        self.name.append(name)
        self.extra.append(extra)

    def __len__(self) -> int:
        return len(self.start)

    def __iter__(self) -> Iterator[tuple[float, float, int, int]]:
        return zip(self.start, self.duration, self.name, self.extra, strict=True)

    def keep(self, wanted: Callable[[int], bool]) -> Rows:
        """The rows whose name id is `wanted`."""
        kept = Rows()
        for row in self:
            if wanted(row[2]):
                kept.append(*row)
        return kept


@dataclass(slots=True)
class RankTrace:
    """What one rank's trace holds, as compact columns."""

    rank: int
    path: Path
    names: list[str] = field(default_factory=list)
    device: Rows = field(default_factory=Rows)
    """GPU events; extra = correlation id (-1: none)."""
    launches: Rows = field(default_factory=Rows)
    """Host events with a correlation id (kernel launches); extra = the correlation id."""
    steps: list[tuple[float, float, int, int]] = field(default_factory=list)
    """ProfilerStep#N: start, duration, N, thread id (the training thread)."""
    host: Rows = field(default_factory=Rows)
    """Host operators and annotations; extra = thread id (interned)."""

    @property
    def has_device_events(self) -> bool:
        return len(self.device) > 0


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _events(stream: IO[str], path: Path) -> Iterator[dict[str, Any]]:
    """The objects of the top-level "traceEvents" array, one at a time."""
    decoder = json.JSONDecoder()
    buffer = ""
    # Until the key and the array's "[" are both read (a read may end between them).
    while (start := buffer.find('"traceEvents"')) < 0 or buffer.find("[", start) < 0:
        more = stream.read(_CHUNK)
        if not more:
            raise ScaletrainError(
                f"{path} has no traceEvents: it is not a PyTorch profiler trace.",
                "give traces written by st.profile / --profile, torch.profiler's "
                "export_chrome_trace or tensorboard_trace_handler.",
            )
        buffer += more
    position = buffer.index("[", start) + 1
    while True:
        position = _SEPARATORS.match(buffer, position).end()  # type: ignore[union-attr]
        if position >= len(buffer):
            more = stream.read(_CHUNK)
            if not more:
                return
            buffer, position = buffer[position:] + more, 0
            continue
        if buffer[position] == "]":
            return
        try:
            event, position = decoder.raw_decode(buffer, position)
        except json.JSONDecodeError:
            more = stream.read(_CHUNK)
            if not more:
                raise ScaletrainError(
                    f"{path} ends in the middle of an event: the trace was cut short.",
                    "profile again and let the schedule finish (or the script end) before "
                    "the job stops; a trace is written when the active steps are done.",
                ) from None
            buffer, position = buffer[position:] + more, 0
            continue
        yield event


def _header_rank(path: Path) -> int | None:
    """distributedInfo.rank from the trace header (Kineto writes it before the events)."""
    with _open(path) as stream:
        head = stream.read(65536)
    found = re.search(r'"distributedInfo"\s*:\s*', head)
    if found is None:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(head, found.end())
    except json.JSONDecodeError:
        return None
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) else None


def trace_rank(path: Path) -> int:
    rank = _header_rank(path)
    if rank is None:
        found = _RANK_IN_NAME.search(path.name)
        rank = int(found.group(1)) if found else None
    if rank is None:
        raise ScaletrainError(
            f"{path} names no rank (no distributedInfo, no rank-<N> in the file name).",
            "name each rank's trace rank-<N>.pt.trace.json, as st.profile does.",
        )
    return rank


def read_trace(path: Path) -> RankTrace:
    """One rank's trace as compact rows (complete events only: "ph": "X")."""
    names = trace_names()
    trace = RankTrace(rank=trace_rank(path), path=path)
    ids: dict[str, int] = {}
    threads: dict[Any, int] = {}  # Kineto's thread ids are numbers or names
    host_categories = names.operator_categories | names.annotation_categories
    with _open(path) as stream:
        for event in _events(stream, path):
            if event.get("ph") != "X" or "dur" not in event:
                continue
            category, name = event.get("cat"), event.get("name", "")
            args = event.get("args") or {}
            name_id = ids.get(name)
            if name_id is None:
                name_id = ids[name] = len(trace.names)
                trace.names.append(name)
            start, duration = float(event["ts"]), float(event["dur"])
            thread = threads.setdefault(event.get("tid", 0), len(threads))
            if category in names.device_categories and _int(args.get("stream")) is not None:
                correlation = _int(args.get("correlation"))
                trace.device.append(start, duration, name_id, _or_none(correlation))
            elif category in host_categories:
                if names.step.match(name):
                    step = int(name.rsplit("#", 1)[1])
                    trace.steps.append((start, duration, step, thread))
                else:
                    trace.host.append(start, duration, name_id, thread)
            correlation = _int(args.get("correlation"))
            if correlation is not None and category not in names.device_categories:
                trace.launches.append(start, duration, name_id, correlation)
    trace.steps.sort()
    return trace


def _or_none(correlation: int | None) -> int:
    return -1 if correlation is None else correlation


def _int(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None
