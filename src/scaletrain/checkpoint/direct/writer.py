"""DCP's file writer, made to run at the disk's speed without losing a guarantee.

Every file's size and CRC-32 are computed from the bytes on their way to the disk (no second
read for the manifest); the files bypass the page cache where the file system allows it
(direct_file.py); torch.save's own CRC of each record inside the file is skipped, since the
file's CRC covers those bytes; the number of writer threads (one file each) follows this
rank's share of the state; each file is fsynced once, by DCP. An asynchronous save's one
file is built in memory first (file_image.py) and written from it.

The files stay DCP's own format: plain `torch.distributed.checkpoint.load` reads them.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystem, FileSystemWriter
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from scaletrain.checkpoint.direct.direct_file import DirectFile
from scaletrain.checkpoint.direct.file_image import FileImage
from scaletrain.checkpoint.direct.torch_private import StorageInfo
from scaletrain.checkpoint.manifest import FileDigest, crc32
from scaletrain.checkpoint.state import local_part

# A thread (and file) per this many bytes of a rank's share, up to the rank's cores: below
# it a thread costs more than it overlaps.
BYTES_PER_WRITER_THREAD = 128 * 1024 * 1024
MAX_WRITER_THREADS = 4
_TEMPORARY_SUFFIX = ".tmp"  # DCP writes .metadata.tmp, then renames it


@dataclass(frozen=True, kw_only=True, slots=True)
class WriterOptions:
    """How DCP writes one rank's share."""

    thread_count: int
    """Writer threads, one file each."""
    per_thread_copy_ahead: int
    """Bytes DCP copies from the GPU ahead of writing them, on a CUDA stream of the writing
    thread's current device. 0 for a state already staged in CPU memory: then the writer
    creates no CUDA stream at all (torch's own async staging does the same), so a background
    thread never touches GPU 0 of a rank that trains on another GPU."""


def writer_options(share_bytes: int, cores: int, *, staged: bool) -> WriterOptions:
    """Threads for a share of `share_bytes` on a rank with `cores` cores; a staged state
    (asynchronous save) is written by one thread, to leave the cores to training."""
    if staged:
        return WriterOptions(thread_count=1, per_thread_copy_ahead=0)
    wanted = max(1, share_bytes // BYTES_PER_WRITER_THREAD)
    threads = max(1, min(wanted, cores, MAX_WRITER_THREADS))
    return WriterOptions(thread_count=threads, per_thread_copy_ahead=10_000_000)


def tensor_bytes(state: Any) -> list[int]:
    """Bytes of each tensor this rank holds in a state dict (its share of a sharded one)."""
    if isinstance(state, torch.Tensor):
        if hasattr(state, "local_shards"):  # ShardedTensor (DeepSpeed's partitions): no numel
            return [size for shard in state.local_shards() for size in tensor_bytes(shard.tensor)]
        local = local_part(state)
        return [int(local.numel() * local.element_size())]
    if isinstance(state, Mapping):
        return [size for value in state.values() for size in tensor_bytes(value)]
    if isinstance(state, list | tuple):
        return [size for value in state for size in tensor_bytes(value)]
    return []


def state_bytes(state: Any) -> int:
    """Bytes of the tensors this rank holds in a state dict (its share of a sharded one)."""
    return sum(tensor_bytes(state))


class _ChecksummingStream(io.RawIOBase):
    """A file opened for writing that keeps the size and CRC-32 of what went through it."""

    def __init__(self, file: DirectFile) -> None:
        super().__init__()
        self._file = file
        self.crc = 0
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        written = self._file.write(view)
        self.crc = crc32(view, self.crc)  # releases the GIL for large pieces
        self.size += len(view)
        return written

    def tell(self) -> int:
        return self._file.tell()

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()


class ChecksummingFileSystem(FileSystem):
    """DCP's local file system, recording each written file's digest by its name."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, FileDigest] = {}
        self._lock = threading.Lock()

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with DirectFile(path) as file:
            stream = _ChecksummingStream(file)
            yield stream
        self.record(Path(path).name, FileDigest(size=stream.size, crc32=stream.crc))

    def record(self, name: str, file_digest: FileDigest) -> None:
        with self._lock:
            self.digests[name.removesuffix(_TEMPORARY_SUFFIX)] = file_digest


class DirectWriter(FileSystemWriter):
    """FileSystemWriter with checksums while writing and threads chosen per share; with an
    `image`, this rank's one file is built in it and written from it (an asynchronous
    save), and `copied` is called once the state's tensors are copied there."""

    def __init__(
        self,
        path: Path,
        options: WriterOptions,
        *,
        image: FileImage | None = None,
        copied: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(
            path,
            thread_count=options.thread_count,
            per_thread_copy_ahead=options.per_thread_copy_ahead,
        )
        self.fs: ChecksummingFileSystem = ChecksummingFileSystem()
        self._image = image
        self._copied = copied

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        if self._image is None:
            return super().write_data(plan, planner)
        name = f"{plan.storage_data.prefix}0{DEFAULT_SUFFIX}"  # DCP's name for a rank's file
        # DCP's order within a file: non-tensor values first, then tensors (a stable sort).
        items = sorted(plan.items, key=lambda item: item.type != WriteItemType.BYTE_IO)
        placed, content = self._image.build(items, planner.resolve_data)
        self._copied()
        checksum = crc32(content, 0)
        with DirectFile(Path(self.path) / name) as file:
            file.write_aligned(content)
            file.flush()
            os.fsync(file.fileno())
        self.fs.record(name, FileDigest(size=len(content), crc32=checksum))
        results: Future[list[WriteResult]] = Future()
        results.set_result(
            [
                WriteResult(
                    index=place.item.index,
                    size_in_bytes=place.length,
                    storage_data=StorageInfo(
                        relative_path=name, offset=place.offset, length=place.length
                    ),
                )
                for place in placed
            ]
        )
        return results
