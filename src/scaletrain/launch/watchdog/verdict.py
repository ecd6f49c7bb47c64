"""Which ranks stopped first, and on which nodes: the watchdog's verdict from every rank's
answer to a stack request.

In a hang every rank waits, so "stopped first" means the ranks the others wait for. The
evidence, strongest first; the first kind that names some ranks but not all decides:

1. silence: the rank did not answer (its node is gone, or cannot reach the run folder);
2. network: an interface that carries training traffic is down or has lost its link, or the
   rendezvous host does not answer (the others reach it);
3. collectives: the flight recorder shows the rank has not entered the collective the
   others have (its last enqueued sequence number is lower);
4. steps: the rank finished fewer steps than the others;
5. stacks: the rank's main thread is not inside a collective (it computes, sleeps, reads).

If every rank looks the same (all wait in one collective, every link is up) nobody is
blamed: a fault between the nodes, or a collective that never completes on any rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scaletrain.core.hang_report import StoppedRank
from scaletrain.core.rank_files import InterfaceState
from scaletrain.launch.watchdog.collect import Collected, RankStacks

# Ranks named one by one in a summary; the rest are counted.
_SHOWN = 4


@dataclass(frozen=True, slots=True)
class Verdict:
    stopped_first: list[StoppedRank]
    blamed_nodes: list[str]
    """Nodes of the ranks that stopped first; empty when that would be every node."""
    summary: str


Rule = Callable[[Mapping[int, RankStacks]], dict[int, str]]


def _silent(ranks: Mapping[int, RankStacks]) -> dict[int, str]:
    return {
        rank: "did not answer: its node is unreachable, or it cannot write to the run folder"
        for rank, stacks in ranks.items()
        if stacks.answer is None
    }


def _interface_problem(interface: InterfaceState) -> str:
    if interface.name == "(none)":
        return f"has {interface.why}"  # no route to MASTER_ADDR ...
    if not interface.up:
        return f"has its network interface {interface.name} down"
    return f"has no link on network interface {interface.name}"


def _network(ranks: Mapping[int, RankStacks]) -> dict[int, str]:
    found = {}
    for rank, stacks in ranks.items():
        if stacks.answer is None:
            continue
        problems = [_interface_problem(i) for i in stacks.answer.interfaces if not i.working]
        reach = stacks.answer.rendezvous
        if reach and reach != "reachable" and not reach.startswith("unknown"):
            problems.append(f"cannot reach the rendezvous host ({reach})")
        if problems:
            found[rank] = " and ".join(problems)
    return found


def _collectives(ranks: Mapping[int, RankStacks]) -> dict[int, str]:
    found: dict[int, str] = {}
    groups = {g for s in ranks.values() if s.answer for g in s.answer.collectives}
    for group in sorted(groups):
        positions = {
            rank: s.answer.collectives[group]["last_enqueued"]
            for rank, s in ranks.items()
            if s.answer and group in s.answer.collectives
        }
        top = max(positions.values())
        for rank, position in positions.items():
            if position < top and rank not in found:
                found[rank] = (
                    f"has not reached collective #{top} of process group {group}, where the "
                    f"others wait (its last: #{position})"
                )
    return found


def _steps(ranks: Mapping[int, RankStacks]) -> dict[int, str]:
    steps = {rank: s.beat.step for rank, s in ranks.items() if s.beat}
    top = max(steps.values(), default=0)
    return {
        rank: f"finished {step} steps, the others {top}"
        for rank, step in steps.items()
        if step < top
    }


def _stacks(ranks: Mapping[int, RankStacks]) -> dict[int, str]:
    return {
        rank: "is not in a collective"
        for rank, stacks in ranks.items()
        if stacks.main is not None and not stacks.main.waiting
    }


RULES: tuple[Rule, ...] = (_silent, _network, _collectives, _steps, _stacks)


def judge(collected: Collected) -> Verdict:
    """The ranks the others wait for, why, and their nodes."""
    ranks = collected.ranks
    named: dict[int, str] = {}
    for rule in RULES:
        named = rule(ranks)
        if 0 < len(named) < len(ranks):
            break
    else:
        named = {}
    stopped = [
        StoppedRank(rank=rank, host=ranks[rank].host, why=_with_place(why, ranks[rank]))
        for rank, why in sorted(named.items())
    ]
    hosts = {stacks.host for stacks in ranks.values()} - {"?"}
    blamed = sorted({rank.host for rank in stopped} - {"?"})
    if set(blamed) == hosts:
        blamed = []  # leaving out every node would leave nothing to run on
    return Verdict(stopped_first=stopped, blamed_nodes=blamed, summary=_summary(stopped, ranks))


def _with_place(why: str, stacks: RankStacks) -> str:
    return f"{why}, at {stacks.main.where}" if stacks.main else why


def _summary(stopped: list[StoppedRank], ranks: Mapping[int, RankStacks]) -> str:
    if not stopped:
        waiting = sum(1 for s in ranks.values() if s.main is not None and s.main.waiting)
        return (
            f"no rank is behind: {waiting} of {len(ranks)} wait in a collective and every "
            "watched network link is up (a fault between nodes, or a collective that never "
            "completes)"
        )
    shown = [f"rank {rank.rank} on {rank.host} {rank.why}" for rank in stopped[:_SHOWN]]
    more = len(stopped) - _SHOWN
    return "; ".join(shown) + (f"; and {more} more rank(s)" if more > 0 else "")
