"""What each training process leaves in the run folder for the hang watchdog, `status` and
`stacks`: its heartbeat, and its answers to stack requests. The runtime writes them (inside
the processes), login-node tools read them: no torch here.

    ranks/rank-N.json               heartbeat: last step, phase, pid; rewritten every few s
    stacks/request.json             the newest request: {"id", "reason", "time"}
    stacks/<id>/rank-N.txt          that rank's Python stacks, every thread (faulthandler)
    stacks/<id>/rank-N.json         its heartbeat, network interfaces, rendezvous, collectives
    stacks/<id>/rank-N.flight.json  PyTorch's flight recorder, where the backend has one
    stacks/signal/rank-N.txt        what SIGUSR2 dumps (faulthandler, even with the GIL held)
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from scaletrain.core.run_folder import RunFolder

Phase = Literal["start", "loop", "save", "outside", "ended"]
"""start: before the first step; loop: inside the training loop; save: writing a checkpoint;
outside: between loops (evaluation); ended: the process left (its pid means nothing now)."""

REQUEST_FILE = "request.json"
SIGNAL_FOLDER = "signal"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def seconds_since(iso_time: str, now: datetime | None = None) -> float:
    """Seconds from an ISO time written by `now_iso` (on any node) until now, here."""
    moment = datetime.fromisoformat(iso_time)
    return ((now or datetime.now(timezone.utc)) - moment).total_seconds()


@dataclass(frozen=True, kw_only=True, slots=True)
class RankBeat:
    """ranks/rank-N.json: one training process, as it last described itself."""

    rank: int
    world_size: int
    host: str
    """Slurm's name of the node (SLURMD_NODENAME) in a job, else the host name."""
    pid: int
    pid_start: int
    """The process's start time in clock ticks since boot (/proc/<pid>/stat, field 22):
    tells the process apart from a later one that got the same pid."""
    main_thread: int
    """threading.main_thread().ident: names the main thread in stack dumps."""
    step: int
    phase: Phase
    script: str = ""
    """The training script (sys.argv[0]): frames in it are the user's code."""
    step_time_s: float | None = None
    """Median of the recent steps' wall times (data loading included)."""
    save_time_s: float | None = None
    """The longest checkpoint save of this process so far."""
    last_step_time: str | None = None
    """When the last step finished (ISO 8601, UTC, this node's clock)."""
    updated: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class InterfaceState:
    """A network interface that carries training traffic, as the kernel sees it on one node."""

    name: str
    up: bool
    """Administratively up (IFF_UP)."""
    running: bool
    """Link (carrier) present (IFF_RUNNING)."""
    why: str = ""
    """Why it is watched: 'NCCL_SOCKET_IFNAME', 'route to MASTER_ADDR', ..."""

    @property
    def working(self) -> bool:
        return self.up and self.running


@dataclass(frozen=True, kw_only=True, slots=True)
class RankAnswer:
    """stacks/<id>/rank-N.json: a rank's answer to a stack request."""

    beat: RankBeat
    interfaces: list[InterfaceState] = field(default_factory=list)
    rendezvous: str = ""
    """Whether MASTER_ADDR:MASTER_PORT answered: 'reachable', or what failed."""
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per process group (flight recorder): last_enqueued / last_completed sequence numbers."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StackRequest:
    id: str
    reason: str
    time: str


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Replace `path` atomically (readers see the old or the new file); no fsync: these files
    are rewritten every few seconds and worth nothing after a crash of the node."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")
    temporary.replace(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def beat_path(folder: RunFolder, rank: int) -> Path:
    return folder.ranks / f"rank-{rank}.json"


def write_beat(folder: RunFolder, beat: RankBeat) -> None:
    write_json(beat_path(folder, beat.rank), asdict(beat))


def process_start_ticks(pid: int | str = "self") -> int | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat, field 22); None
    when no such process runs here."""
    try:
        # After "pid (command) ", whose command may hold spaces: field 3 onwards.
        fields = (
            Path(f"/proc/{pid}/stat")
            .read_text(encoding="utf-8", errors="replace")
            .rsplit(")", 1)[1]
            .split()
        )
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def runs_here(beat: RankBeat) -> bool:
    """Whether the process of `beat` still runs on this machine (not a later one that got
    the same pid)."""
    return beat.phase != "ended" and process_start_ticks(beat.pid) == beat.pid_start


def beat_from_dict(data: dict[str, Any]) -> RankBeat | None:
    try:
        return RankBeat(**data)
    except TypeError:
        return None  # written by another version of scaletrain


def read_beats(folder: RunFolder) -> dict[int, RankBeat]:
    """Every rank's newest heartbeat, by rank."""
    beats = {}
    if folder.ranks.is_dir():
        for path in folder.ranks.glob("rank-*.json"):
            data = _read_json(path)
            beat = beat_from_dict(data) if data else None
            if beat is not None:
                beats[beat.rank] = beat
    return dict(sorted(beats.items()))


def since_last_step(beats: Mapping[int, RankBeat]) -> float | None:
    """Seconds since any rank last finished a step; None before the first step."""
    times = [beat.last_step_time for beat in beats.values() if beat.last_step_time]
    return min(seconds_since(moment) for moment in times) if times else None


def request_stacks(folder: RunFolder, reason: str) -> StackRequest:
    """Ask every rank for its stacks; they answer into stacks/<id>/ within a beat interval."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    request = StackRequest(id=f"{stamp}-{secrets.token_hex(2)}", reason=reason, time=now_iso())
    write_json(folder.stacks / REQUEST_FILE, asdict(request))
    return request


def read_request(folder: RunFolder) -> StackRequest | None:
    data = _read_json(folder.stacks / REQUEST_FILE)
    try:
        return StackRequest(**data) if data else None
    except TypeError:
        return None


def answer_folder(folder: RunFolder, request_id: str) -> Path:
    return folder.stacks / request_id


def signal_dump_path(folder: RunFolder, rank: int) -> Path:
    return folder.stacks / SIGNAL_FOLDER / f"rank-{rank}.txt"


def write_answer(folder: Path, answer: RankAnswer) -> None:
    write_json(folder / f"rank-{answer.beat.rank}.json", asdict(answer))


def read_answers(folder: Path) -> dict[int, RankAnswer]:
    """The answers in stacks/<id>/, by rank."""
    answers = {}
    for path in folder.glob("rank-*.json"):
        if path.name.endswith(".flight.json"):
            continue
        data = _read_json(path)
        answer = _answer_from_dict(data) if data else None
        if answer is not None:
            answers[answer.beat.rank] = answer
    return dict(sorted(answers.items()))


def _answer_from_dict(data: dict[str, Any]) -> RankAnswer | None:
    beat = beat_from_dict(data.pop("beat", {}))
    if beat is None:
        return None
    try:
        interfaces = [InterfaceState(**item) for item in data.pop("interfaces", [])]
        return RankAnswer(beat=beat, interfaces=interfaces, **data)
    except TypeError:
        return None
