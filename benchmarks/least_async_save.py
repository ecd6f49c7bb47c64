"""The least work an asynchronous save can do, as the floor checkpoint_cost.py measures
scaletrain's asynchronous save against, in the same run.

Any asynchronous save must copy the state it saves (training goes on changing it), and a
checkpoint that is checked on load needs a checksum of its bytes; then the bytes go to the
disk. This does exactly that and nothing else: each rank copies its share of the tensors
(the share its rank writes in scaletrain's checkpoint is about as large) into one page-aligned
buffer, reused from save to save, in a thread; the next optimizer step waits for that copy,
as scaletrain's does; the thread then takes the buffer's CRC-32 (ISA-L, scaletrain's) and
writes it straight from that memory with scaletrain's DirectFile (around the page cache, in
8 MiB pieces), then fsyncs. No file format, no manifest, no collective, no rename.

With `copy=False` it only writes: the buffer, copied once when made, goes to the disk at
every save with neither a copy nor a checksum. What that costs training is the disk's share
of the least save's cost on this machine.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

import torch

from scaletrain.checkpoint.direct.direct_file import ALIGNMENT, DirectFile
from scaletrain.checkpoint.manifest import crc32


class LeastAsyncSave:
    """Copy `tensors` in a background thread, then checksum and write the copy to `path`;
    or, without `copy`, write the copy made at the start, again at every save."""

    def __init__(self, tensors: list[torch.Tensor], path: Path, *, copy: bool = True) -> None:
        self._tensors = tensors
        self._path = path
        self._copy = copy
        offsets, end = [], 0
        for tensor in tensors:
            offsets.append(end)
            end += -(-tensor.nbytes // ALIGNMENT) * ALIGNMENT
        self._buffer = mmap.mmap(-1, max(end, ALIGNMENT))
        whole = torch.frombuffer(self._buffer, dtype=torch.uint8)
        self._copies = [
            whole[offset : offset + tensor.nbytes].view(tensor.dtype)
            for offset, tensor in zip(offsets, tensors, strict=True)
        ]
        if not copy:
            self._copy_tensors()
        self._copied = threading.Event()
        self._copied.set()
        self._thread: threading.Thread | None = None
        self.waited_for_copy_s = 0.0

    def start(self) -> None:
        self.wait()
        self._copied.clear()
        self._thread = threading.Thread(target=self._copy_and_write, name="least-save")
        self._thread.start()

    def before_step(self, *_: object) -> None:
        """An optimizer step pre-hook: wait for the copy of what the step changes."""
        if not self._copied.is_set():
            started = time.perf_counter()
            self._copied.wait()
            self.waited_for_copy_s += time.perf_counter() - started

    @property
    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _copy_tensors(self) -> None:
        for copy, tensor in zip(self._copies, self._tensors, strict=True):
            copy.copy_(tensor.detach().reshape(-1))

    def _copy_and_write(self) -> None:
        try:
            if self._copy:
                self._copy_tensors()
        finally:
            self._copied.set()
        with memoryview(self._buffer) as data, DirectFile(self._path) as file:
            if self._copy:
                crc32(data, 0)
            file.write_aligned(data)  # every slot is whole blocks: nothing is copied
            file.flush()
            os.fsync(file.fileno())
