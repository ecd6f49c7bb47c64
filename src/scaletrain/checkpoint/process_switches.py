"""Process-wide switches that checkpoint saves and loads turn off while they run.

Each is restored to what it was once the last of the saves or loads that overlap ends (an
asynchronous save can overlap a synchronous one, or a load); a change to it made by other
code meanwhile is undone then. DCP's collectives are left out of saves and loads in a world
of one process.
"""

from __future__ import annotations

import functools
import gc
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


class _ProcessSwitch:
    def __init__(self, read: Callable[[], bool], write: Callable[[bool], None]) -> None:
        self._read, self._write = read, write
        self._lock = threading.Lock()
        self._users = 0
        self._previous = True

    def hold_off(self) -> None:
        """Switch it off until as many `release` calls (from any thread) as `hold_off` ones."""
        with self._lock:
            if self._users == 0:
                self._previous = self._read()
                self._write(False)
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._write(self._previous)

    @contextmanager
    def off(self) -> Iterator[None]:
        self.hold_off()
        try:
            yield
        finally:
            self.release()


def _switch_gc(on: bool) -> None:
    if on:
        gc.enable()
    else:
        gc.disable()


# torch.save's CRC-32 of every record inside a file: torch's documented switch
# (torch.serialization.set_crc32_options; torch.load still reads such files). The
# manifest's CRC of each whole file covers those bytes.
without_record_checksums = _ProcessSwitch(
    torch.serialization.get_crc32_options, torch.serialization.set_crc32_options
).off

# Python's automatic garbage collection. DCP pickles and unpickles its plans, results and
# metadata, a few objects per tensor: for a state of 2,400 tensors those objects set off
# collections of every object of the process (torch's among them) that took about half of a
# save's CPU. What a save allocates is freed by reference counting once it ends; garbage in
# cycles waits until then. Training frameworks switch it off for whole runs (torchtitan's
# gc_freq, Megatron's manual_gc); here only while a save or a load runs.
automatic_gc = _ProcessSwitch(gc.isenabled, _switch_gc)
without_automatic_gc = automatic_gc.off

# DCP warns at every save or load run without its collectives that it "assumes the intent
# is to save in a single process". scaletrain runs them so in a world of one, where the
# collectives only pickle each plan for itself: a third of the time of a save of 2,400 small
# tensors. The notice would only puzzle there, so it is left out in this process.
_SINGLE_PROCESS_NOTICE = (
    r"torch\.distributed is disabled, unavailable or uninitialized, "
    r"assuming the intent is to (save|load) in a single process"
)


def without_dcp_collectives(world_size: int) -> bool:
    """DCP's `no_dist` for a save or load by `world_size` processes: True for one process."""
    if world_size != 1:
        return False
    _leave_out_single_process_notice()
    return True


@functools.cache
def _leave_out_single_process_notice() -> None:
    # Once per process: every change to the filters makes Python forget which warnings it
    # has shown, and the user's own warnings would show again after each save.
    warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_NOTICE, category=UserWarning)
