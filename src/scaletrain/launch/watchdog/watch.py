"""The hang watchdog's loop: read the ranks' heartbeats, and when no rank finishes a step for
the hang limit, dump every rank's stack, name who stopped first, write hang.json and end the
training step. Halfway to the limit it reports who is behind and ends nothing.

The clock runs only while training is in its loop: not before the first step (start-up,
compilation), not while every rank is outside the loop (evaluation between epochs). While a
rank saves a checkpoint the limit is longer (twice the limit, or five times the longest save
so far). It counts the watchdog's own time between changes of the heartbeats, so the nodes'
clocks need not agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scaletrain.core.hang_report import (
    NOTICE_FRACTION,
    HangReport,
    beat_interval,
    hang_limit,
    save_hang_limit,
    write_hang_report,
)
from scaletrain.core.progress_line import format_duration
from scaletrain.core.rank_files import RankBeat, now_iso, read_beats
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.watchdog.collect import Collected, collect_stacks
from scaletrain.launch.watchdog.verdict import Verdict, judge

# Ranks listed one per line in the job's log; the rest are in the stacks folder.
_LISTED_RANKS = 16
# Extra time for the answers beyond two heartbeat intervals: a rank's check that the
# rendezvous host answers may take 3 s.
_ANSWER_MARGIN_S = 5.0


def answer_wait(floor_s: float) -> float:
    """How long to wait for every rank's stacks: two heartbeat intervals and a margin."""
    return 2 * beat_interval(floor_s) + _ANSWER_MARGIN_S


@dataclass
class HangWatch:
    """Tells, from successive heartbeats, for how long training has made no progress."""

    floor_s: float
    clock: Callable[[], float] = time.monotonic
    limit_s: float = 0.0
    step: int = 0
    _seen: tuple[object, ...] = ()
    _since: float | None = None

    def __post_init__(self) -> None:
        self.limit_s = self.floor_s

    def stalled_for(self, beats: Mapping[int, RankBeat]) -> float | None:
        """Seconds without progress while training is in its loop; None while it is not."""
        now = self.clock()
        phases = {beat.phase for beat in beats.values()}
        seen = tuple((beat.pid, beat.step, beat.phase) for beat in beats.values())
        self.step = max((beat.step for beat in beats.values()), default=0)
        if "save" in phases:
            longest = max((beat.save_time_s or 0.0 for beat in beats.values()), default=0.0)
            self.limit_s = save_hang_limit(self.floor_s, longest)
        elif "loop" in phases:
            median = max((beat.step_time_s or 0.0 for beat in beats.values()), default=0.0)
            self.limit_s = hang_limit(self.floor_s, median)
        else:
            self._since = None
            return None
        if seen != self._seen or self._since is None:
            self._seen, self._since = seen, now
        return now - self._since


def watch_run(
    run: RunFolder,
    floor_s: float,
    *,
    end_step: Callable[[HangReport], None],
    say: Callable[[str], None],
    stop: threading.Event,
) -> HangReport | None:
    """Watch until `stop` is set (training ended: None) or training hangs: then write
    hang.json, call `end_step` and return the report."""
    watch = HangWatch(floor_s)
    poll = beat_interval(floor_s) / 2
    noticed = False
    while not stop.wait(poll):
        stalled = watch.stalled_for(read_beats(run))
        if stalled is None or stalled < NOTICE_FRACTION * watch.limit_s:
            if noticed:
                say(f"steps resumed (step {watch.step}); nothing was ended")
            noticed = False
            continue
        if not noticed:
            noticed = True
            collected = collect_stacks(run, "stall", wait_s=answer_wait(floor_s), stop=stop)
            verdict = judge(collected)
            say(
                f"no step for {format_duration(stalled)} after step {watch.step} (the step "
                f"ends at {format_duration(watch.limit_s)}): {verdict.summary}"
            )
            _list_ranks(collected, say)
            continue
        if stalled >= watch.limit_s:
            collected = collect_stacks(run, "hang", wait_s=answer_wait(floor_s), stop=stop)
            if stop.is_set():
                return None
            report = _report(run, watch, stalled, collected, judge(collected))
            write_hang_report(run.hang_report, report)
            say(
                f"no step for {format_duration(stalled)} after step {watch.step} (limit "
                f"{format_duration(watch.limit_s)}): ending the training step. Stopped first: "
                f"{report.summary}"
            )
            _list_ranks(collected, say)
            if report.blamed_nodes:
                say(f"blamed node(s): {report.exclude}")
            say(f"every rank's stack: {run.root / report.stacks}/")
            end_step(report)
            return report
    return None


def _report(
    run: RunFolder, watch: HangWatch, stalled: float, collected: Collected, verdict: Verdict
) -> HangReport:
    return HangReport(
        time=now_iso(),
        stalled_s=round(stalled, 1),
        limit_s=round(watch.limit_s, 1),
        step=watch.step,
        summary=verdict.summary,
        stopped_first=verdict.stopped_first,
        blamed_nodes=verdict.blamed_nodes,
        stacks=str(collected.folder.relative_to(run.root)),
        answered=collected.answered,
        world_size=len(collected.ranks),
    )


def _list_ranks(collected: Collected, say: Callable[[str], None]) -> None:
    """Where each rank's main thread is, one line per rank (the first few)."""
    for stacks in list(collected.ranks.values())[:_LISTED_RANKS]:
        if stacks.main is None:
            where = "no answer" if stacks.answer is None else "main thread not in the dump"
        else:
            state = "waiting in a collective" if stacks.main.waiting else "busy"
            where = f"{state}, at {stacks.main.where}"
        step = f"step {stacks.beat.step}" if stacks.beat else "no heartbeat"
        say(f"  rank {stacks.rank} on {stacks.host} ({step}): {where}")
    hidden = len(collected.ranks) - _LISTED_RANKS
    if hidden > 0:
        say(f"  ... and {hidden} more rank(s): see {collected.folder}/")
