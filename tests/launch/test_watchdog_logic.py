"""The watchdog's reading of stack dumps, its verdict on who stopped first, and its clock."""

from __future__ import annotations

import dataclasses
import faulthandler
import threading
import time
from pathlib import Path

import pytest

from scaletrain.core.rank_files import (
    InterfaceState,
    Phase,
    RankAnswer,
    RankBeat,
    StackRequest,
)
from scaletrain.launch.watchdog.collect import Collected, RankStacks
from scaletrain.launch.watchdog.stack_text import Frame, MainThread, is_waiting, main_thread
from scaletrain.launch.watchdog.verdict import judge
from scaletrain.launch.watchdog.watch import HangWatch

SCRIPT = "/home/me/train.py"


def a_sleeping_thread() -> None:
    time.sleep(30)


def test_a_real_dump_names_each_thread_and_where_the_main_thread_is(tmp_path: Path) -> None:
    sleeper = threading.Thread(target=a_sleeping_thread, daemon=True)
    sleeper.start()
    dump = tmp_path / "stacks.txt"
    with dump.open("w") as file:
        faulthandler.dump_traceback(file=file, all_threads=True)
    text = dump.read_text()
    here = main_thread(text, threading.main_thread().ident or 0, __file__)
    assert here is not None and not here.waiting
    assert here.where.startswith("test_watchdog_logic.py:")
    assert "in test_a_real_dump_names_each_thread" in here.where
    other = main_thread(text, sleeper.ident or 0, __file__)
    assert other is not None and "in a_sleeping_thread" in other.where
    assert main_thread(text, 12345, __file__) is None  # not in the dump


def test_waiting_means_inside_a_collective_or_ddp_backward() -> None:
    site = "/venv/lib/python3.11/site-packages/"
    assert is_waiting([Frame(site + "torch/autograd/graph.py", 1072, "_engine_run_backward")])
    assert is_waiting([Frame(site + "torch/distributed/distributed_c10d.py", 2800, "all_reduce")])
    assert is_waiting([Frame(site + "scaletrain/checkpoint/schedule.py", 170, "result")])
    assert not is_waiting([Frame(SCRIPT, 57, "step"), Frame(site + "numpy/x.py", 3, "f")])


def rank(
    number: int,
    host: str,
    *,
    step: int = 10,
    answered: bool = True,
    waiting: bool = True,
    interfaces: tuple[InterfaceState, ...] = (),
    enqueued: int | None = None,
    rendezvous: str = "reachable",
) -> RankStacks:
    beat = RankBeat(
        rank=number, world_size=4, host=host, pid=100 + number, pid_start=1, main_thread=1,
        step=step, phase="loop", script=SCRIPT,
    )  # fmt: skip
    collectives = {"0": {"last_enqueued": enqueued, "last_completed": 0}} if enqueued else {}
    answer = RankAnswer(
        beat=beat, interfaces=list(interfaces), rendezvous=rendezvous, collectives=collectives
    )
    where = "train.py:80 in main" if waiting else "train.py:57 in load_batch"
    return RankStacks(
        rank=number,
        beat=beat,
        answer=answer if answered else None,
        stacks="...",
        main=MainThread(waiting=waiting, where=where) if answered else None,
    )


def collected(*ranks: RankStacks) -> Collected:
    request = StackRequest(id="r", reason="hang", time="2026-11-23T17:00:00+00:00")
    return Collected(request=request, folder=Path("stacks/r"), ranks={r.rank: r for r in ranks})


HOSTS = ("n1", "n1", "n2", "n2")


def test_a_cut_link_blames_its_node() -> None:
    down = InterfaceState(name="hsn0", up=False, running=False, why="GLOO_SOCKET_IFNAME")
    ranks = [rank(r, h, interfaces=(down,) if h == "n2" else ()) for r, h in enumerate(HOSTS)]
    verdict = judge(collected(*ranks))
    assert [(r.rank, r.host) for r in verdict.stopped_first] == [(2, "n2"), (3, "n2")]
    assert verdict.stopped_first[0].why == (
        "has its network interface hsn0 down, at train.py:80 in main"
    )
    assert verdict.blamed_nodes == ["n2"]


def test_ranks_that_do_not_answer_come_first() -> None:
    no_link = InterfaceState(name="hsn0", up=True, running=False)
    ranks = [rank(0, "n1"), rank(1, "n1", interfaces=(no_link,)), rank(2, "n2", answered=False)]
    ranks.append(rank(3, "n2"))
    verdict = judge(collected(*ranks))
    assert [r.rank for r in verdict.stopped_first] == [2]
    assert "did not answer" in verdict.summary and verdict.blamed_nodes == ["n2"]


def test_the_rank_behind_in_the_flight_recorder_is_named_with_its_line() -> None:
    ranks = [rank(r, h, enqueued=48) for r, h in enumerate(HOSTS)]
    ranks[3] = rank(3, "n2", enqueued=47, waiting=False)
    verdict = judge(collected(*ranks))
    assert verdict.summary == (
        "rank 3 on n2 has not reached collective #48 of process group 0, where the others "
        "wait (its last: #47), at train.py:57 in load_batch"
    )


def test_without_a_flight_recorder_the_stacks_decide() -> None:
    ranks = [rank(r, h) for r, h in enumerate(HOSTS)]
    ranks[1] = rank(1, "n1", waiting=False)
    verdict = judge(collected(*ranks))
    assert verdict.summary == "rank 1 on n1 is not in a collective, at train.py:57 in load_batch"
    assert verdict.blamed_nodes == ["n1"]


def test_when_every_rank_looks_the_same_nobody_is_blamed() -> None:
    verdict = judge(collected(*(rank(r, h) for r, h in enumerate(HOSTS))))
    assert verdict.stopped_first == [] and verdict.blamed_nodes == []
    assert verdict.summary.startswith("no rank is behind: 4 of 4 wait in a collective")


def test_every_node_is_never_blamed() -> None:
    ranks = [rank(0, "n1", waiting=False), rank(1, "n1"), rank(2, "n2", waiting=False)]
    ranks.append(rank(3, "n2"))
    verdict = judge(collected(*ranks))
    assert [r.rank for r in verdict.stopped_first] == [0, 2]
    assert verdict.blamed_nodes == []  # leaving out n1 and n2 would leave nothing


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def beats(*states: tuple[int, Phase], median: float | None = 0.1) -> dict[int, RankBeat]:
    """Heartbeats of ranks in (step, phase)."""
    found = {}
    for number, (step, phase) in enumerate(states):
        found[number] = RankBeat(
            rank=number, world_size=len(states), host="n1", pid=number, pid_start=1,
            main_thread=1, step=step, phase=phase, step_time_s=median,
        )  # fmt: skip
    return found


@pytest.mark.parametrize("phases", [("start", "start"), ("outside", "outside"), ("start", "ended")])
def test_the_clock_stands_still_outside_the_training_loop(phases: tuple[Phase, Phase]) -> None:
    clock = Clock()
    watch = HangWatch(30, clock)
    for minute in range(10):
        clock.now = 60.0 * minute
        assert watch.stalled_for(beats(*((5, phase) for phase in phases))) is None


def test_the_clock_counts_time_without_progress_and_restarts_on_progress() -> None:
    clock = Clock()
    watch = HangWatch(30, clock)
    assert watch.stalled_for(beats((5, "loop"), (5, "loop"))) == 0
    clock.now = 25
    assert watch.stalled_for(beats((5, "loop"), (5, "loop"))) == 25
    # A rank still evaluating while the other waits in the loop: the clock runs.
    clock.now = 40
    assert watch.stalled_for(beats((5, "loop"), (5, "outside"))) == 0
    clock.now = 70
    assert watch.stalled_for(beats((5, "loop"), (5, "outside"))) == 30
    clock.now = 71
    assert watch.stalled_for(beats((6, "loop"), (6, "loop"))) == 0
    assert watch.step == 6 and watch.limit_s == 30
    watch.stalled_for(beats((6, "loop"), (6, "loop"), median=4.0))
    assert watch.limit_s == 80  # 20 median steps of 4 s


def test_a_save_has_a_longer_limit_from_the_longest_save_so_far() -> None:
    clock = Clock()
    watch = HangWatch(30, clock)
    saving = beats((10, "loop"), (10, "save"))
    assert watch.stalled_for(saving) == 0 and watch.limit_s == 60  # twice the limit
    clock.now = 59
    assert watch.stalled_for(saving) == 59
    # The next save, after one of 40 s: five times the longest save.
    clock.now = 100
    assert watch.stalled_for(beats((20, "loop"), (20, "loop"))) == 0
    saving = beats((20, "loop"), (20, "save"))
    saving[1] = dataclasses.replace(saving[1], save_time_s=40.0)
    assert watch.stalled_for(saving) == 0 and watch.limit_s == 200
