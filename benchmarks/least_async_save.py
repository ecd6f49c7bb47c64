"""The least work an asynchronous save can do, as the floor checkpoint_cost.py measures
scaletrain's asynchronous save against, in the same run.

Any asynchronous save must copy the state it saves (training goes on changing it), and a
checkpoint that is checked on load needs a checksum of its bytes; then the bytes go to the
disk. This does exactly that and nothing else: each rank copies its share of the tensors
(the share its rank writes in scaletrain's checkpoint is about as large) into one page-aligned
buffer, reused from save to save, in a thread; the next optimizer step waits for that copy,
as scaletrain's does; the thread then takes the buffer's CRC-32 (ISA-L, scaletrain's) and
writes it around the page cache in 8 MiB pieces, then fsyncs. No file format, no manifest,
no collective, no rename.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path

import torch

from scaletrain.checkpoint.manifest import crc32

ALIGNMENT = 4096  # the disk's block and the page: what direct I/O asks of offsets and memory
PIECE_BYTES = 8 * 1024 * 1024


class LeastAsyncSave:
    """Copy `tensors` in a background thread, then checksum and write the copy to `path`."""

    def __init__(self, tensors: list[torch.Tensor], path: Path) -> None:
        self._tensors = tensors
        self._path = path
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

    def _copy_and_write(self) -> None:
        try:
            for copy, tensor in zip(self._copies, self._tensors, strict=True):
                copy.copy_(tensor.detach().reshape(-1))
        finally:
            self._copied.set()
        with memoryview(self._buffer) as data:
            crc32(data, 0)
            descriptor = _open_direct(self._path)
            try:
                for start in range(0, len(data), PIECE_BYTES):
                    os.write(descriptor, data[start : start + PIECE_BYTES])
                os.fsync(descriptor)
            finally:
                os.close(descriptor)


def _open_direct(path: Path) -> int:
    """The file opened for direct writes, or through the page cache where they are refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        return os.open(path, flags | getattr(os, "O_DIRECT", 0))
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        return os.open(path, flags)
