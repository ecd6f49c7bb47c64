"""Checkpoint files written around the page cache (O_DIRECT) where the file system allows it.

Why: a buffered write copies every byte into the kernel's page cache, and that copy (with
the page allocations behind it) is most of the CPU a save costs, which an asynchronous
save's writer takes from training. Written directly, the device reads the bytes from this
process's buffer and the kernel copies nothing. Lustre and GPFS take large aligned direct
writes at full speed, and a checkpoint is not read again soon by the node that wrote it, so
the page cache gains nothing.

Direct I/O needs the buffer's address, the length and the file offset aligned to the
device's block: bytes are gathered in a page-aligned buffer and written in whole blocks; at
a flush the last partial block is written padded and the file cut back to its size, and
kept, so that later bytes rewrite that block whole. Where the file system refuses O_DIRECT
(ramfs, some FUSE and NFS mounts, macOS) at the open or at a write (an alignment larger than
ours), the file is written through the page cache.
"""

from __future__ import annotations

import errno
import fcntl
import io
import mmap
import os
import threading
from typing import Any

# Covers the 512- and 4096-byte blocks of disks and the page alignment Lustre's clients ask
# for (64 KiB pages on some aarch64 nodes).
ALIGNMENT = max(4096, mmap.PAGESIZE)
# Bytes gathered before a direct write: large enough that each write streams at the disk's
# speed (a direct write waits for the device), small enough to keep one per writing thread.
CHUNK_BYTES = 8 * 1024 * 1024
_O_DIRECT = getattr(os, "O_DIRECT", 0)

# One buffer per writing thread, reused from file to file and save to save: a fresh buffer
# costs page faults on every save (expensive on virtual machines).
_buffers = threading.local()


def _take_thread_buffer() -> mmap.mmap:
    """This thread's buffer, or a new one while another file of this thread holds it."""
    if getattr(_buffers, "taken", False):
        return mmap.mmap(-1, CHUNK_BYTES)  # anonymous: page-aligned
    if getattr(_buffers, "buffer", None) is None:
        _buffers.buffer = mmap.mmap(-1, CHUNK_BYTES)
    _buffers.taken = True
    buffer: mmap.mmap = _buffers.buffer
    return buffer


def _give_back(buffer: mmap.mmap) -> None:
    if buffer is getattr(_buffers, "buffer", None):
        _buffers.taken = False
    else:
        buffer.close()


class DirectFile(io.RawIOBase):
    """A new file opened for writing, with O_DIRECT when its file system takes it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self.direct = bool(_O_DIRECT)
        try:
            self._fd = os.open(path, flags | _O_DIRECT, 0o666)  # the umask applies, as for open()
        except OSError as error:
            if not self.direct or error.errno != errno.EINVAL:
                raise
            self.direct = False
            self._fd = os.open(path, flags, 0o666)
        self._buffer = _take_thread_buffer() if self.direct else None
        self._filled = 0  # bytes in the buffer, the first at an aligned offset of the file
        self._position = 0  # bytes written to this file so far
        self._flushed = 0  # of which in the file

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def fileno(self) -> int:
        return self._fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self._buffer is None:
            _write_all(self._fd, view)
        else:
            taken = 0
            while taken < len(view):
                piece = min(len(view) - taken, CHUNK_BYTES - self._filled)
                self._buffer[self._filled : self._filled + piece] = view[taken : taken + piece]
                self._filled += piece
                taken += piece
                if self._filled == CHUNK_BYTES:
                    self._write_out(CHUNK_BYTES)
                    self._filled = 0
        self._position += len(view)
        return len(view)

    def write_aligned(self, view: memoryview) -> None:
        """Write `view`, whose memory starts at a page, at the file's start: the disk reads
        its whole blocks straight from that memory, only the last partial block is copied."""
        if self._position:
            raise ValueError("write_aligned writes a file from its start")
        whole = len(view) - len(view) % ALIGNMENT
        for start in range(0, whole, CHUNK_BYTES):
            self._write_view(view[start : min(whole, start + CHUNK_BYTES)])
        self._position = self._flushed = whole
        self.write(view[whole:])

    def flush(self) -> None:
        """Put every byte written so far into the file (what DCP does before its fsync)."""
        if self._buffer is None or self._flushed == self._position:
            return
        whole = self._filled - self._filled % ALIGNMENT
        tail = self._filled - whole
        if tail:
            padded = whole + ALIGNMENT
            self._buffer[self._filled : padded] = bytes(padded - self._filled)
            self._write_out(padded)
            os.ftruncate(self._fd, self._position)
            # Keep the partial block: the next bytes are written after it, from its start.
            self._buffer.move(0, whole, tail)
            os.lseek(self._fd, -ALIGNMENT, os.SEEK_CUR)
        else:
            self._write_out(whole)
        self._filled = tail
        self._flushed = self._position

    def _write_out(self, count: int) -> None:
        """Write the buffer's first `count` bytes at the file's offset."""
        assert self._buffer is not None
        with memoryview(self._buffer) as buffer:
            self._write_view(buffer[:count])

    def _write_view(self, view: memoryview) -> None:
        """Write `view` (aligned memory, whole blocks while direct) at the file's offset."""
        done = 0
        while done < len(view):
            try:
                done += os.write(self._fd, view[done:])
            except OSError as error:
                if not self.direct or error.errno != errno.EINVAL:
                    raise
                # The device wants a larger alignment: the rest goes through the page cache.
                flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
                fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
                self.direct = False

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            if self._buffer is not None:
                _give_back(self._buffer)
                self._buffer = None
            super().close()


def _write_all(fd: int, view: memoryview) -> None:
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])
