"""What a test session must not leave behind: processes, semaphores, temporary folders.

At its start the session becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a
process whose parent dies (a killed rank's DataLoader worker, forkserver, resource tracker)
is handed to pytest instead of to init, so nothing a test started can escape the count.
Child processes get a TMPDIR of the session's own, and where the session may (root), a
/dev/shm of its own in a private mount namespace, so that only this session's semaphores
are counted while other sessions run on the same machine. At its end anything left is
listed, ended, and fails the session.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# prctl(2) and mount(2) constants (linux/prctl.h, linux/sched.h, linux/mount.h).
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
SHARED_MEMORY = Path("/dev/shm")
# Processes may need a moment to notice that their parent is gone (DataLoader workers look
# every 5 s) and resource trackers then clean up: this long, then what is left is left over.
GRACE_S = 15.0


@dataclass(frozen=True, slots=True)
class Isolation:
    """Where this session's child processes put temporary files and semaphores."""

    tmpdir: Path
    private_shared_memory: bool


def isolate() -> Isolation:
    """Make this process a subreaper, give child processes their own TMPDIR and, if allowed,
    their own /dev/shm. Call it first thing in the session, while pytest has one thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    system_tmp = Path(tempfile.gettempdir())  # pytest's own temporary folders stay there
    tmpdir = Path(tempfile.mkdtemp(prefix="scaletrain-tests-"))
    os.environ["TMPDIR"] = str(tmpdir)
    # torch.compile's cache outlives runs on purpose: where it would be without our TMPDIR.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(system_tmp / "torchinductor_tests"))
    private = (
        os.geteuid() == 0
        and libc.unshare(_CLONE_NEWNS) == 0
        and libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0
        and libc.mount(b"tmpfs", str(SHARED_MEMORY).encode(), b"tmpfs", 0, b"mode=1777") == 0
    )
    return Isolation(tmpdir=tmpdir, private_shared_memory=private)


def _own_helpers() -> set[int]:
    """multiprocessing's forkserver and resource tracker of this process (tests that make
    DataLoader workers in pytest start them): they end when pytest does, not before."""
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }
    return {pid for pid in pids if pid is not None}


def children() -> dict[int, str]:
    """Living child processes of this one (orphans of the session end up here), with their
    command lines; not this process's own multiprocessing helpers."""
    helpers = _own_helpers()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # Fields after the command name in parentheses: state, ppid, ...
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == os.getpid() and state != "Z" and int(entry.name) not in helpers:
            found[int(entry.name)] = command.strip()[:200]
    return found


def new_children_after(before: dict[int, str], timeout: float = GRACE_S) -> dict[int, str]:
    """Processes handed to this session since `before` (orphans of what a test started) that
    are still alive after `timeout` seconds; {} as soon as there are none."""
    deadline = time.monotonic() + timeout
    while True:
        _reap()
        new = {pid: command for pid, command in children().items() if pid not in before}
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


def _reap() -> None:
    """Collect the exit status of ended orphans (a subreaper must, or they stay zombies)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass


def leftovers(isolation: Isolation) -> list[str]:
    """Everything the session left behind, each as one line; what is found is also ended or
    removed, so that the next session starts clean."""
    deadline = time.monotonic() + GRACE_S
    while True:
        _reap()
        processes = children()
        if not processes or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    found = [f"process {pid}: {command}" for pid, command in processes.items()]
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap()
    if isolation.private_shared_memory:
        for entry in sorted(SHARED_MEMORY.iterdir()):
            found.append(f"shared memory: {entry}")
            entry.unlink()
    for entry in sorted(isolation.tmpdir.iterdir()):
        found.append(f"temporary file or folder: {entry}")
    shutil.rmtree(isolation.tmpdir, ignore_errors=True)
    return found
