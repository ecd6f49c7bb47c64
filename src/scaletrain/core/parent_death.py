"""A process that ends when the one that started it ends, even when that one is killed
(kill -9, OOM): Linux's parent-death signal (PR_SET_PDEATHSIG).

Used on both sides: the launcher `scaletrain run` starts early ends with the CLI
(launch/early_start.py), and the forkserver of a training process ends with it
(runtime/child_processes.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# prctl(2): deliver this signal to the calling process when its parent thread exits.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None, *, sent: signal.Signals = signal.SIGKILL) -> None:
    """Get signal `sent` when the parent process ends (Linux only; elsewhere nothing happens).

    `parent` is the pid the caller expects as its parent, where it knows it: if that one has
    ended before the request took effect, the caller gets the signal now instead of never.
    SIGTERM lets a process that starts others (torchrun) end them first.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sent, 0, 0, 0) != 0:
        return  # a kernel that refuses: the process lives as before
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sent)
