"""Read faulthandler's stack dumps: which thread is where, and is the main thread waiting in
a collective or busy somewhere else (the rank the others wait for).

    Thread 0x00007f515801d6c0 (most recent call first):
      File "/path/train.py", line 57 in train_step
      ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\d+) in (?P<function>.+)$')
# Code that waits for the other ranks: torch's collectives, DDP (its gradient all_reduce runs
# inside backward) and scaletrain's own collectives (the checkpoint vote, metrics, barriers).
_WAITING_IN = (
    "torch/distributed/",
    "torch/nn/parallel/",
    "torch/autograd/",
    "scaletrain/checkpoint/schedule.py",
    "scaletrain/train/metrics.py",
    "scaletrain/train/ranks.py",
    "scaletrain/runtime/process_group.py",
)


@dataclass(frozen=True, slots=True)
class Frame:
    path: str
    line: int
    function: str

    def short(self) -> str:
        return f"{Path(self.path).name}:{self.line} in {self.function}"


def threads(text: str) -> dict[int, list[Frame]]:
    """Each thread's frames, innermost first, by thread id. A text with several dumps (the
    signal file) keeps the last dump of each thread."""
    found: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        if match := _THREAD.match(line):
            current = found[int(match.group(1), 16)] = []
        elif current is not None and (frame := _FRAME.match(line)):
            current.append(Frame(frame["path"], int(frame["line"]), frame["function"]))
    return found


def is_waiting(frames: list[Frame]) -> bool:
    """Whether a thread waits for other ranks: one of its frames is a collective's."""
    return any(part in frame.path for frame in frames for part in _WAITING_IN)


def location(frames: list[Frame], script: str) -> str:
    """Where a thread is, for people: its innermost frame in the training script (with the
    innermost frame of all when that is elsewhere, e.g. in a library it called)."""
    if not frames:
        return "no Python frame"
    name = Path(script).name
    own = next((frame for frame in frames if Path(frame.path).name == name), None)
    if own is None or own is frames[0]:
        return frames[0].short()
    return f"{own.short()} (in {frames[0].short()})"


@dataclass(frozen=True, slots=True)
class MainThread:
    """The main thread of one rank: where it is and whether it waits in a collective."""

    waiting: bool
    where: str


def main_thread(text: str, main_id: int, script: str) -> MainThread | None:
    """The main thread in a dump; None when the dump does not show it."""
    frames = threads(text).get(main_id)
    if frames is None:
        return None
    return MainThread(waiting=is_waiting(frames), where=location(frames, script))
