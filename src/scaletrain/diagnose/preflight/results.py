"""The outcome of one check on one rank, and everything one rank reports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]


def compact_list(numbers: Iterable[int]) -> str:
    """{0,1,2,5,7,8} -> '0-2,5,7-8', as taskset -c and Slurm write core and rank lists."""
    ranges: list[list[int]] = []
    for number in sorted(numbers):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges) or "none"


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    """One check: what was seen, and when it failed, the fix in one line."""

    name: str
    status: Status
    seen: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def ok(name: str, seen: str) -> CheckResult:
    return CheckResult(name=name, status="ok", seen=seen)


def fail(name: str, seen: str, fix: str) -> CheckResult:
    return CheckResult(name=name, status="fail", seen=seen, fix=fix)


def warn(name: str, seen: str, fix: str) -> CheckResult:
    return CheckResult(name=name, status="warn", seen=seen, fix=fix)


def skip(name: str, seen: str) -> CheckResult:
    return CheckResult(name=name, status="skip", seen=seen)


@dataclass(frozen=True, kw_only=True, slots=True)
class RankFacts:
    """What one rank saw about itself; compared across ranks on rank 0."""

    host: str
    launcher: str = "?"
    rank: int = -1
    local_rank: int = -1
    world_size: int = 0
    local_world_size: int = 0
    node_rank: int = -1
    master: str = ""
    device: str = "cpu"
    """The device this rank uses: 'cpu', or a GPU's identity (UUID, or the id in the
    *_VISIBLE_DEVICES variable when torch sees no GPU)."""
    torch_device: str = "cpu"
    visible_devices: tuple[str, ...] = ()
    cpus: tuple[int, ...] = ()
    threads: int = 0
    torch_version: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankReport:
    """All checks of one rank, as gathered on rank 0."""

    facts: RankFacts
    results: tuple[CheckResult, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return any(result.failed for result in self.results)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankReport:
        facts = data["facts"]
        return cls(
            facts=RankFacts(
                **{
                    **facts,
                    "visible_devices": tuple(facts["visible_devices"]),
                    "cpus": tuple(facts["cpus"]),
                }
            ),
            results=tuple(CheckResult(**result) for result in data["results"]),
        )
