"""Ask every rank for its stacks and gather what came back (the watchdog and `stacks`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scaletrain.core.rank_files import (
    RankAnswer,
    RankBeat,
    StackRequest,
    answer_folder,
    read_answers,
    read_beats,
    request_stacks,
    signal_dump_path,
)
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.watchdog.stack_text import MainThread, main_thread

# How often to look for answers while waiting for them.
_LOOK_S = 0.2


@dataclass(frozen=True, slots=True)
class RankStacks:
    """What is known about one rank after a stack request."""

    rank: int
    beat: RankBeat | None
    """Its newest heartbeat (None: it never wrote one)."""
    answer: RankAnswer | None
    """Its answer (None: it did not answer in time)."""
    stacks: str
    """The dump's text ('' when there is none)."""
    main: MainThread | None
    """Its main thread, read from the dump."""

    @property
    def host(self) -> str:
        return self.beat.host if self.beat else "?"


@dataclass(frozen=True, slots=True)
class Collected:
    request: StackRequest
    folder: Path
    """stacks/<request id>/ in the run folder."""
    ranks: dict[int, RankStacks]

    @property
    def answered(self) -> int:
        return sum(1 for rank in self.ranks.values() if rank.answer is not None)


def expected_ranks(beats: Mapping[int, RankBeat]) -> list[int]:
    """Every rank of the job: 0 .. world size - 1 (also those that never wrote a beat)."""
    world_size = max((beat.world_size for beat in beats.values()), default=0)
    return list(range(max(world_size, max(beats, default=-1) + 1)))


def collect_stacks(
    run: RunFolder,
    reason: str,
    *,
    wait_s: float,
    stop: threading.Event | None = None,
    signal_offsets: Mapping[int, int] | None = None,
) -> Collected:
    """Request stacks, wait up to `wait_s` for every rank's answer, and read them. Ranks that
    did not answer are read from their SIGUSR2 dump when `signal_offsets` says where the
    dump that was asked for begins in their signal file."""
    request = request_stacks(run, reason)
    folder = answer_folder(run, request.id)
    ranks = expected_ranks(read_beats(run))
    deadline = time.monotonic() + wait_s
    answers: dict[int, RankAnswer] = {}
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        answers = read_answers(folder) if folder.is_dir() else {}
        if all(rank in answers for rank in ranks):
            break
        time.sleep(_LOOK_S)
    beats = read_beats(run)
    collected = {}
    for rank in ranks:
        answer = answers.get(rank)
        beat = answer.beat if answer else beats.get(rank)
        text = _stack_text(run, folder, rank, answer, (signal_offsets or {}).get(rank))
        main = main_thread(text, beat.main_thread, beat.script) if beat and text else None
        collected[rank] = RankStacks(rank=rank, beat=beat, answer=answer, stacks=text, main=main)
    return Collected(request=request, folder=folder, ranks=collected)


def _stack_text(
    run: RunFolder, folder: Path, rank: int, answer: RankAnswer | None, offset: int | None
) -> str:
    dump = folder / f"rank-{rank}.txt"
    if answer is not None and dump.is_file():
        return dump.read_text(errors="replace")
    signal_file = signal_dump_path(run, rank)
    if offset is None or not signal_file.is_file():
        return ""
    with signal_file.open(errors="replace") as file:
        file.seek(offset)
        text = file.read()
    if text:  # kept with the answers, so that the folder holds every rank's stacks
        folder.mkdir(parents=True, exist_ok=True)
        dump.write_text(text, encoding="utf-8")
    return text
