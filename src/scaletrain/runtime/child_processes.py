"""Processes a training process starts end with it, even when it is killed (kill -9, OOM).

multiprocessing's forkserver (which st.loader's DataLoader workers use) outlives a killed
rank: each worker keeps the forkserver's keep-alive pipe open and watches the forkserver,
not the rank, so the forkserver, its workers and the rank's resource tracker wait for each
other forever, holding the worker's memory and the semaphores in /dev/shm. `init` preloads
`forkserver_preload` into the forkserver, which asks Linux (PR_SET_PDEATHSIG) to kill the
forkserver when its rank dies and each process it forks when the forkserver dies. The
resource tracker then sees its last client go, removes the semaphores and exits.

Linux sends the signal when the *thread* that started the forkserver ends: the main thread,
where DataLoaders are iterated. A forkserver started from a short-lived thread ends with it,
and multiprocessing starts a new one when it is next needed.

SIGTERM asks a rank to save and stop, but Slurm (scancel, the time limit) and torchrun (when
it stops, to the rank's whole process group) send it to the forkserver and the workers too:
a worker or forkserver dying of it crashes the rank ("DataLoader worker exited
unexpectedly") before it saves, and a rank left waiting for the crashed one holds torchrun
for its 30 s. Both ignore SIGTERM and end with their rank instead.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing import forkserver

# prctl(2): deliver this signal to the calling process when its parent thread exits.
_PR_SET_PDEATHSIG = 1
_PRELOAD_MODULE = "scaletrain.runtime.forkserver_preload"


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


def end_children_with_this_process() -> None:
    """Make the forkserver this process may start, and everything it forks, end with it."""
    if not sys.platform.startswith("linux"):
        return
    context = multiprocessing.get_context("forkserver")
    # The default preload is ['__main__']; keep whatever is set and add ours.
    current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if _PRELOAD_MODULE not in current:
        context.set_forkserver_preload([*current, _PRELOAD_MODULE])


def ignore_stop_signal(worker_init: Callable[[int], object] | None, worker_id: int) -> None:
    """A DataLoader worker's start (`worker_init_fn`, with the user's own after it): ignore
    SIGTERM, which torch's worker set-up makes fatal; the worker ends with its rank."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if worker_init is not None:
        worker_init(worker_id)
