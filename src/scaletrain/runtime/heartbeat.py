"""Each training process's heartbeat: its last step, kept in the run folder for the hang
watchdog and `scaletrain status`, and its stacks on request.

The training loop only notes the step in memory (`note_step`: a few attribute writes, no
collective, no I/O). A daemon thread writes ranks/rank-N.json when the step or phase changed,
at most once per beat interval, and answers stack requests (stacks/request.json) with the
Python stacks of every thread, the flight recorder, the node's network interfaces and
whether the rendezvous host answers. SIGUSR2 dumps the stacks from C (stack_dump.py).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import IO

from scaletrain.core.hang_report import DEFAULT_HANG_LIMIT_S, beat_interval, parse_hang_limit
from scaletrain.core.rank_files import (
    Phase,
    RankAnswer,
    RankBeat,
    answer_folder,
    now_iso,
    process_start_ticks,
    read_request,
    signal_dump_path,
    write_answer,
    write_beat,
    write_json,
)
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import HANG_LIMIT
from scaletrain.runtime.layout import DistEnv
from scaletrain.runtime.network import rendezvous_reachable, watched_interfaces
from scaletrain.runtime.stack_dump import (
    collective_positions,
    dump_stacks,
    flight_recorder,
    register_signal_dump,
    unregister_signal_dump,
)

# Steps whose times make the median step time reported to the watchdog.
_RECENT_STEPS = 64
# A rank that cannot reach the rendezvous host within this is cut off from it.
_CONNECT_TIMEOUT_S = 3.0


class Heartbeat:
    """One process's heartbeat thread."""

    def __init__(self, env: DistEnv, folder: RunFolder, environ: Mapping[str, str]) -> None:
        self._folder = folder
        self._environ = dict(environ)
        self._interval = beat_interval(_hang_limit(environ) or DEFAULT_HANG_LIMIT_S)
        self._started = datetime.now().astimezone()
        self._beat = RankBeat(
            rank=env.rank,
            world_size=env.world_size,
            host=environ.get("SLURMD_NODENAME") or os.uname().nodename,
            pid=os.getpid(),
            pid_start=process_start_ticks() or 0,
            main_thread=threading.main_thread().ident or 0,
            script=sys.argv[0],
            step=0,
            phase="start",
        )
        self._step = 0
        self._phase: Phase = "start"
        self._stepped = False
        self._last_step_at: float | None = None
        self._last_step_wall: float | None = None
        self._durations: deque[float] = deque(maxlen=_RECENT_STEPS)
        self._save_started: float | None = None
        self._longest_save: float | None = None
        self._written: tuple[int, Phase] | None = None
        self._answered: str | None = None
        self._signal_file: IO[str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scaletrain-heartbeat", daemon=True)

    def start(self) -> None:
        self._signal_file = register_signal_dump(signal_dump_path(self._folder, self._beat.rank))
        self._write_beat()
        self._thread.start()

    def stop(self) -> None:
        """The process is leaving: a last beat says so (its pid means nothing any more)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._interval)
        self._phase = "ended"
        self._write_beat()
        unregister_signal_dump(self._signal_file)

    def note_step(self, step: int) -> None:
        """A step finished (called at every step boundary: memory only)."""
        if step == self._step:
            return  # noted already: the Checkpointer's loop and Progress both note each step
        now = time.monotonic()
        if self._last_step_at is not None and step > self._step:
            self._durations.append((now - self._last_step_at) / (step - self._step))
        self._step, self._last_step_at, self._last_step_wall = step, now, time.time()
        self._phase, self._stepped = "loop", True

    def enter_phase(self, phase: Phase) -> Phase:
        """Enter `phase` ('loop' only once a step has finished: a first step may compile);
        return the phase left, to return to."""
        left = self._phase
        self._phase = "outside" if phase == "loop" and not self._stepped else phase
        if phase == "save" and left != "save":
            self._save_started = time.monotonic()
        elif left == "save" and phase != "save" and self._save_started is not None:
            took = time.monotonic() - self._save_started
            self._longest_save = max(took, self._longest_save or 0.0)
        return left

    def _current(self) -> RankBeat:
        durations = list(self._durations)  # one C call: safe while the loop appends
        wall = self._last_step_wall
        return replace(
            self._beat,
            step=self._step,
            phase=self._phase,
            step_time_s=statistics.median(durations) if durations else None,
            save_time_s=self._longest_save,
            last_step_time=(
                datetime.fromtimestamp(wall, timezone.utc).isoformat(timespec="milliseconds")
                if wall is not None
                else None
            ),
            updated=now_iso(),
        )

    def _write_beat(self) -> None:
        beat = self._current()
        try:
            write_beat(self._folder, beat)
        except OSError:
            return  # the run folder is unreachable now; the watchdog notices the silence
        self._written = (beat.step, beat.phase)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self._written != (self._step, self._phase):
                self._write_beat()
            request = read_request(self._folder)
            if request is not None and request.id != self._answered:
                self._answered = request.id
                if datetime.fromisoformat(request.time) >= self._started:
                    self._answer(request.id)

    def _answer(self, request_id: str) -> None:
        """Stacks, flight recorder, network: the answer file last, so that its presence means
        the answer is complete."""
        folder = answer_folder(self._folder, request_id)
        rank = self._beat.rank
        try:
            folder.mkdir(parents=True, exist_ok=True)
            dump_stacks(folder / f"rank-{rank}.txt")
            recorder = flight_recorder()
            if recorder is not None:
                write_json(folder / f"rank-{rank}.flight.json", recorder)
            answer = RankAnswer(
                beat=self._current(),
                interfaces=watched_interfaces(self._environ),
                rendezvous=rendezvous_reachable(self._environ, _CONNECT_TIMEOUT_S),
                collectives=collective_positions(recorder),
            )
            write_answer(folder, answer)
        except OSError:
            return  # the run folder is unreachable: the watchdog counts this rank as silent


_current: Heartbeat | None = None


def _hang_limit(environ: Mapping[str, str]) -> float:
    return parse_hang_limit(environ.get(HANG_LIMIT, str(DEFAULT_HANG_LIMIT_S)))


def watchdog_enabled(folder: RunFolder | None, environ: Mapping[str, str]) -> bool:
    """Whether this process keeps a heartbeat: it runs in a run folder (started by `scaletrain
    run` or a generated job) and the hang watchdog is not off."""
    return folder is not None and _hang_limit(environ) > 0


def start_heartbeat(env: DistEnv, environ: Mapping[str, str]) -> None:
    """Start this process's heartbeat thread (once). A run folder that cannot be written
    costs the heartbeat, not the training (the preflight's run-folder check names it)."""
    global _current
    if _current is None and env.run_folder is not None:
        heartbeat = Heartbeat(env, env.run_folder, environ)
        try:
            heartbeat.start()
        except OSError as error:
            print(
                f"scaletrain: rank {env.rank} keeps no heartbeat, so the hang watchdog cannot "
                f"watch it: {error}",
                file=sys.stderr,
                flush=True,
            )
            return
        _current = heartbeat


def stop_heartbeat() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None


def note_step(step: int) -> None:
    """Record that `step` steps have finished in this process (no I/O, no collective)."""
    if _current is not None:
        _current.note_step(step)


def enter_phase(phase: Phase) -> Phase:
    """Tell the watchdog where training is (loop, save, outside); returns the phase left."""
    return _current.enter_phase(phase) if _current is not None else phase
