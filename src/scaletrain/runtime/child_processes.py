"""Processes a training process starts end with it, even when it is killed (kill -9, OOM).

multiprocessing's forkserver (which st.loader's DataLoader workers use) outlives a killed
rank: each worker keeps the forkserver's keep-alive pipe open and watches the forkserver,
not the rank, so the forkserver, its workers and the rank's resource tracker wait for each
other forever, holding the worker's memory and the semaphores in /dev/shm. `init` preloads
`forkserver_preload` into the forkserver, which asks Linux (PR_SET_PDEATHSIG, through
core/parent_death.py) to kill the forkserver when its rank dies and each process it forks
when the forkserver dies. The resource tracker then sees its last client go, removes the
semaphores and exits.

Linux sends the signal when the *thread* that started the forkserver ends: the main thread,
where DataLoaders are iterated. A forkserver started from a short-lived thread ends with it,
and multiprocessing starts a new one when it is next needed.

SIGTERM asks a rank to save and stop, but Slurm (scancel, the time limit) and torchrun (when
it stops, to the rank's whole process group) send it to the forkserver and the workers too:
a worker or forkserver dying of it crashes the rank ("DataLoader worker exited
unexpectedly") before it saves, and a rank left waiting for the crashed one holds torchrun
for its 30 s. Both ignore SIGTERM and end with their rank instead.

That has one cost at the rank's own exit: multiprocessing ends its daemonic children with
SIGTERM and then waits for them, forever for a worker that ignores it. A loader still alive
then (a script's global, or any frame of an uncaught exception) would hang the exit after
training finished or crashed. Such children are ended first (`end_deaf_children`).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing import forkserver
from pathlib import Path
from types import FrameType

from scaletrain.core.errors import ScaletrainError

_PRELOAD_MODULE = "scaletrain.runtime.forkserver_preload"
# Seconds a loader worker gets to end by itself when its process exits.
_EXIT_GRACE_S = 5.0


def end_children_with_this_process() -> None:
    """Make the forkserver this process may start, and everything it forks, end with it,
    also when this process exits normally."""
    if not sys.platform.startswith("linux"):
        return
    context = multiprocessing.get_context("forkserver")
    # The default preload is ['__main__']; keep whatever is set and add ours.
    current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if _PRELOAD_MODULE not in current:
        context.set_forkserver_preload([*current, _PRELOAD_MODULE])
        # Registered after multiprocessing's own exit handler (imported above), so it runs
        # before it: atexit runs the last registered first.
        atexit.register(end_deaf_children)


def ignores_sigterm(pid: int) -> bool:
    """Whether the kernel will drop a SIGTERM sent to `pid` (SigIgn in /proc; False when
    the process is gone or /proc cannot say)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return False
    ignored = status.split("SigIgn:", 1)[1].split(maxsplit=1)[0] if "SigIgn:" in status else "0"
    return bool(int(ignored, 16) >> (signal.SIGTERM - 1) & 1)


def end_deaf_children() -> None:
    """End this process's daemonic children that ignore SIGTERM (our loader workers), which
    multiprocessing's exit handler would otherwise SIGTERM and then wait for forever.

    SIGINT first: torch's worker loop ends on KeyboardInterrupt like on its own shutdown,
    removing its temporary files; SIGKILL for one still running after a grace period.
    """
    deaf = [
        child
        for child in multiprocessing.active_children()
        if child.daemon and child.pid is not None and ignores_sigterm(child.pid)
    ]
    for child in deaf:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
    for child in deaf:
        child.join(timeout=_EXIT_GRACE_S)
        if child.is_alive():
            child.kill()


def refuse_a_child_importing_the_script() -> None:
    """Fail with the fix when st.init() runs because a child process imports the main script.

    A forkserver's or spawn's child (st.loader's workers) imports the script as `__mp_main__`
    to find what it unpickles, running its top level again: without the main guard, each
    worker would start training, and the rank only saw "DataLoader worker exited
    unexpectedly". torch.multiprocessing.spawn's ranks call st.init() later, from the
    function they run, and pass.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            raise ScaletrainError(
                "st.init() ran in a child process while it imported your script: st.loader's "
                "DataLoader workers start by importing the script, which runs everything at "
                "its top level again.",
                'put the training under `if __name__ == "__main__":` or in a main() '
                "function called from there (as examples/mnist/train.py does), or use "
                "st.loader(..., num_workers=0).",
            )
        frame = frame.f_back


def ignore_stop_signal(worker_init: Callable[[int], object] | None, worker_id: int) -> None:
    """A DataLoader worker's start (`worker_init_fn`, with the user's own after it): ignore
    SIGTERM, which torch's worker set-up makes fatal; the worker ends with its rank."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if worker_init is not None:
        worker_init(worker_id)
