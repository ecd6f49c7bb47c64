"""Where a process is stuck: its Python stacks and, where the backend has one, PyTorch's
flight recorder (the last collectives of each process group, with their sequence numbers).

Python stacks come from faulthandler, which writes them from C: a main thread blocked inside
a collective (in C++, the GIL released) or a C extension holding the GIL still gets dumped.
SIGUSR2 dumps them from the signal handler itself (`scaletrain stacks`); the heartbeat thread
dumps them on a request file (the hang watchdog), adding the flight recorder.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger("scaletrain")

STACK_SIGNAL = signal.SIGUSR2
"""USR1 is the stop signal of generated jobs (and Lightning's requeue signal); USR2 is free
in jobs that scaletrain writes. A handler the script set itself is left alone."""

# Entries kept per process (a few hundred bytes each): the last steps' collectives.
_FLIGHT_RECORDER_ENTRIES = "2000"


def flight_recorder_variables() -> dict[str, str]:
    """What turns the flight recorder on; torch reads it when a process group is created."""
    from torch._C import _distributed_c10d as c10d

    if hasattr(c10d, "_dump_fr_trace_json"):  # torch 2.7+: every backend
        return {"TORCH_FR_BUFFER_SIZE": _FLIGHT_RECORDER_ENTRIES}
    return {"TORCH_NCCL_TRACE_BUFFER_SIZE": _FLIGHT_RECORDER_ENTRIES}  # before: NCCL only


def register_signal_dump(path: Path) -> IO[str] | None:
    """Dump every thread's stack into `path` (appended) on STACK_SIGNAL; the open file, which
    must stay open, or None when the script handles the signal itself."""
    if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
        logger.info("%s has a handler already: no stack dumps on it", STACK_SIGNAL.name)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    file = path.open("a", encoding="utf-8")
    faulthandler.register(STACK_SIGNAL, file=file, all_threads=True, chain=False)
    return file


def unregister_signal_dump(file: IO[str] | None) -> None:
    if file is not None:
        faulthandler.unregister(STACK_SIGNAL)
        file.close()


def dump_stacks(path: Path) -> None:
    """Every thread's Python stack into `path`, innermost frame first."""
    with path.open("w", encoding="utf-8") as file:
        faulthandler.dump_traceback(file=file, all_threads=True)


def flight_recorder() -> dict[str, Any] | None:
    """This process's flight recorder as JSON data; None where torch has none (old versions,
    backends without one) or no process group exists."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    from torch._C import _distributed_c10d as c10d

    # _dump_fr_trace_json: every backend (torch 2.7+); _dump_nccl_trace_json: NCCL, older.
    dump = getattr(c10d, "_dump_fr_trace_json", None) or getattr(
        c10d, "_dump_nccl_trace_json", None
    )
    if dump is None:
        return None
    try:
        data = json.loads(dump(True, False))  # collectives, without C++ stack traces
    except (RuntimeError, ValueError):  # recording off, or nothing recorded
        return None
    return data if isinstance(data, dict) else None


def collective_positions(recorder: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """Per process group: the sequence numbers of the last collective this rank enqueued and
    the last it saw complete. A rank whose last enqueued number is below the others' has not
    reached the collective they wait in."""
    positions = {}
    for group, status in ((recorder or {}).get("pg_status") or {}).items():
        try:
            positions[str(group)] = {
                "last_enqueued": int(status["last_enqueued_collective"]),
                "last_completed": int(status["last_completed_collective"]),
            }
        except (KeyError, TypeError, ValueError):
            continue
    return positions
