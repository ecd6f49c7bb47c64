"""The processes of one run, found the way a user could: every living process whose
environment says it works for that run folder (SCALETRAIN_RUN_DIR, which `scaletrain run`
and generated jobs set and every process they start inherits: torchrun, the ranks, their
forkserver, DataLoader workers and resource tracker, the sampler and the watchdog)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from scaletrain.core import variables


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def run_processes(run_dir: Path, pids: Iterable[int] | None = None) -> dict[int, str]:
    """Living processes (of `pids`, default all) that work for `run_dir`, with their command
    lines. Zombies have no environment left and so are not counted: they have ended."""
    return processes_with(
        {f"{variables.RUN_DIR}={path}" for path in (run_dir, run_dir.resolve())}, pids
    )


def processes_with(entries: set[str], pids: Iterable[int] | None = None) -> dict[int, str]:
    """Living processes (of `pids`, default all) whose environment holds one of `entries`
    ("NAME=value"), with their command lines."""
    wanted = {entry.encode() for entry in entries}
    found = {}
    for pid in _all_pids() if pids is None else pids:
        try:
            environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if environ & wanted:
            found[pid] = command.replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    return found


def living(pids: Iterable[int]) -> dict[int, str]:
    """Those of `pids` that still run (zombies have ended), with their command lines. For a
    process started before it knew its run: `scaletrain run`'s early-started torchrun has
    no SCALETRAIN_RUN_DIR in the environment it was started with (launch/early_start.py)."""
    found = {}
    for pid in pids:
        try:
            state = (
                Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
            )
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if state != "Z":
            found[pid] = command.replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    return found


def parent_of(pid: int) -> int | None:
    """The parent's pid (None once the process has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after the name: state, ppid, ...


def left_after(find: Callable[[], dict[int, str]], timeout: float) -> dict[int, str]:
    """What `find` still finds after `timeout` seconds; {} as soon as it finds nothing."""
    deadline = time.monotonic() + timeout
    while True:
        found = find()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
