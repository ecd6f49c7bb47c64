"""DCP's file reader, made to read each file once, straight into the tensors being loaded.

DCP's own reader runs `torch.load` on every stored tensor (a copy into a new tensor) and then
copies that into the target; checking the files' CRC-32 before would read them a second time.
This reader walks each file of its read plan from start to end: a stored tensor's bytes go
with one `readinto` into the target tensor when it is a whole, contiguous CPU tensor of the
same type (otherwise into one buffer, then narrowed and copied as DCP does, which resharding
needs), everything between them into a small buffer, and the CRC-32 of the files this rank
verifies is taken on the same bytes, in file order. Those files are read whole even where the
plan needs none of their bytes, so that every file is checked by some rank. torch.load parses
a stored tensor's header once per layout (`_ParsedItems`).

A damaged file is not an exception here: its problem is recorded (`problems`) and the load
goes on, so that every rank finishes DCP's collectives; the caller agrees with the other
ranks and, when any rank found a problem, puts nothing of the checkpoint in place and loads
the previous one, whose tensors overwrite what was read (resume.py). The few non-tensor
values of a verified file reach the planner only after its checksum matched.
"""

from __future__ import annotations

import ctypes
import io
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

import torch
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from scaletrain.checkpoint.direct.torch_private import (
    StorageInfo,
    data_offset,
    item_view,
    narrow_tensor_by_index,
)
from scaletrain.checkpoint.manifest import FileDigest, checksum_problem, crc32, digest
from scaletrain.checkpoint.safe_load import SafeFileSystemReader

# Bytes at each end of a stored item that the kernel is asked to read ahead for its parse.
_HEADER_BYTES = 16 * 1024
# Bytes between stored tensors (torch.save's headers) are read in pieces of at most this size.
_GAP_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class _StoredTensor:
    """Where a stored tensor's bytes are inside its item, and how to view them."""

    data_offset: int
    """Bytes from the item's start to its storage record."""
    nbytes: int
    meta: torch.Tensor
    """dtype, shape, strides and storage offset, on the meta device."""


def _stored_tensor(file: IO[bytes], info: StorageInfo) -> _StoredTensor:
    """Parse one DCP item (a torch.save of one tensor) without reading its data."""
    item = item_view(file, info)  # reads from the file's position: made here, used at once
    meta = torch.load(item, map_location="meta", weights_only=True)
    item.seek(0)
    offset, records = data_offset(item)
    if not isinstance(meta, torch.Tensor) or len(records) != 1:
        raise ValueError(f"a stored tensor with {len(records)} storage records")
    return _StoredTensor(data_offset=offset, nbytes=meta.untyped_storage().nbytes(), meta=meta)


@dataclass(frozen=True, slots=True)
class _ParsedItem:
    """A stored item torch.load has parsed: its bytes before and after the tensor data."""

    head: bytes
    tail: bytes
    stored: _StoredTensor


class _ParsedItems:
    """The stored items of one load parsed so far, by length. What torch.load finds in an
    item (without its data) depends on the bytes around the data alone, and scaletrain writes
    the same bytes around every tensor of one layout: an item whose bytes there equal a
    parsed one's is not parsed again (the parse cost 0.3-0.4 ms a tensor, two small reads
    cost microseconds). Items of plain DCP differ in their serialization id: each is parsed."""

    _PER_LENGTH = 8
    """Layouts kept per item length: a state has few layouts, and a miss costs only a parse."""

    def __init__(self) -> None:
        self._by_length: dict[int, list[_ParsedItem]] = {}

    def parse(self, file: io.FileIO, info: StorageInfo) -> _StoredTensor:
        known = self._by_length.setdefault(info.length, [])
        for item in known:
            tail_at = info.offset + info.length - len(item.tail)
            if (
                _bytes_at(file, info.offset, len(item.head)) == item.head
                and _bytes_at(file, tail_at, len(item.tail)) == item.tail
            ):
                return item.stored
        stored = _stored_tensor(file, info)
        data_end = stored.data_offset + stored.nbytes
        if data_end <= info.length and len(known) < self._PER_LENGTH:
            head = _bytes_at(file, info.offset, stored.data_offset)
            tail = _bytes_at(file, info.offset + data_end, info.length - data_end)
            known.append(_ParsedItem(head=head, tail=tail, stored=stored))
        return stored


def _bytes_at(file: io.FileIO, offset: int, size: int) -> bytes:
    return os.pread(file.fileno(), size, offset)


def _ask_for_headers(file: io.FileIO, items: list[StorageInfo]) -> None:
    """Have the kernel read every item's two ends now, all at once (torch's zip reader needs
    the head and the central directory at the tail): one wait for all instead of two small
    reads from the disk per tensor (measured: 0.25-0.64 ms instead of 0.8-1.3 ms a tensor)."""
    for info in items:
        for start in (info.offset, max(info.offset, info.offset + info.length - _HEADER_BYTES)):
            os.posix_fadvise(file.fileno(), start, _HEADER_BYTES, os.POSIX_FADV_WILLNEED)


def _writable_bytes(tensor: torch.Tensor) -> memoryview:
    """The memory of a contiguous CPU tensor, for readinto (any dtype, bf16 included)."""
    size = tensor.numel() * tensor.element_size()
    return memoryview((ctypes.c_char * size).from_address(tensor.data_ptr())).cast("B")


class _SequentialFile:
    """A file read from start to end, with the CRC-32 of everything read so far."""

    def __init__(self, file: io.FileIO, *, checksum: bool) -> None:
        self.file = file
        self.position = 0
        self.crc = 0
        self._checksum = checksum
        self._scratch = bytearray(_GAP_CHUNK_BYTES)

    def read_into(self, target: memoryview) -> None:
        self.file.seek(self.position)
        done = 0
        while done < len(target):
            count = self.file.readinto(target[done:])
            if not count:
                raise EOFError(f"the file ends {len(target) - done:,} bytes early")
            done += count
        if self._checksum:
            self.crc = crc32(target, self.crc)
        self.position += len(target)

    def skip_to(self, offset: int) -> None:
        """Read up to `offset` into scratch memory (only for the checksum: no seek past)."""
        if not self._checksum:
            self.position = offset
            return
        while self.position < offset:
            size = min(offset - self.position, len(self._scratch))
            self.read_into(memoryview(self._scratch)[:size])

    def read_bytes(self, size: int) -> bytes:
        content = bytearray(size)
        self.read_into(memoryview(content))
        return bytes(content)


class VerifyingReader(SafeFileSystemReader):
    """DCP's file reader (with the metadata allowlist) that reads each file once, into the
    target tensors, and checks the CRC-32 of the files in `verify` on those bytes."""

    def __init__(self, path: Path, files: dict[str, FileDigest], verify: Collection[str]) -> None:
        """`files`: every file's digest (the manifest's); `verify`: the names this rank checks."""
        super().__init__(path)
        self._files = files
        self._verify = set(verify)
        self.problems: list[str] = []
        """One line per damaged file this rank found; empty: all intact."""
        self._parsed = _ParsedItems()

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        per_file: dict[str, list[ReadItem]] = {name: [] for name in self._verify}
        for request in plan.items:
            info: StorageInfo = self.storage_data[request.storage_index]
            per_file.setdefault(info.relative_path, []).append(request)
        for name, requests in sorted(per_file.items()):
            self._read_file(name, requests, planner)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read_file(self, name: str, requests: list[ReadItem], planner: LoadPlanner) -> None:
        want = self._files.get(name) if name in self._verify else None
        deferred: list[Callable[[], None]] = []  # non-tensor values: after the checksum
        path = Path(self.path) / name
        try:
            items = self._by_offset(requests)
            with path.open("rb", buffering=0) as file:  # unbuffered: torch.load needs that
                _ask_for_headers(file, [info for info, _ in items])
                stream = _SequentialFile(file, checksum=want is not None)
                for info, wanted in items:
                    stream.skip_to(info.offset)
                    if wanted[0].type == LoadItemType.BYTE_IO:
                        deferred += self._read_bytes(stream, info, wanted, planner)
                    else:
                        self._read_tensor(stream, info, wanted, planner)
                    stream.skip_to(info.offset + info.length)
                if want is not None:
                    stream.skip_to(want.size)
                    if file.read(1) or stream.crc != want.crc32:
                        self.problems.append(checksum_problem(name))
                        return
        except Exception:
            # Garbled bytes make torch.load and torch's zip reader raise almost anything (a
            # tensor of another shape too): the manifest tells damage from a checkpoint that
            # does not fit, whichever rank checks this file's checksum.
            if not path.is_file() or digest(path) == self._files.get(name):
                raise
            self.problems.append(checksum_problem(name))
            return
        for commit in deferred:
            commit()

    def _by_offset(self, requests: list[ReadItem]) -> list[tuple[StorageInfo, list[ReadItem]]]:
        """The stored items the requests need, in file order, each with its requests."""
        items: dict[Any, list[ReadItem]] = {}
        for request in requests:
            items.setdefault(request.storage_index, []).append(request)
        stored = [(self.storage_data[index], wanted) for index, wanted in items.items()]
        for info, _ in stored:
            if info.transform_descriptors:
                raise ValueError(f"stream transforms {info.transform_descriptors} (not written)")
        return sorted(stored, key=lambda pair: pair[0].offset)

    def _read_bytes(
        self,
        stream: _SequentialFile,
        info: StorageInfo,
        wanted: list[ReadItem],
        planner: LoadPlanner,
    ) -> list[Callable[[], None]]:
        """Read a non-tensor value; return its commits, to run after the file's check."""
        value = stream.read_bytes(info.length)
        return [partial(planner.load_bytes, request, io.BytesIO(value)) for request in wanted]

    def _read_tensor(
        self,
        stream: _SequentialFile,
        info: StorageInfo,
        wanted: list[ReadItem],
        planner: LoadPlanner,
    ) -> None:
        """Read a stored tensor into the tensors its requests resolve to."""
        stored = self._parsed.parse(stream.file, info)
        stream.skip_to(info.offset + stored.data_offset)
        meta = stored.meta
        whole = len(wanted) == 1 and list(wanted[0].lengths) == list(meta.shape)
        target = planner.resolve_tensor(wanted[0]).detach() if whole else None
        if (
            target is not None
            and target.device.type == "cpu"
            and target.dtype == meta.dtype
            and target.shape == meta.shape
            and target.is_contiguous()
            and meta.is_contiguous()
            and meta.storage_offset() == 0
            and stored.nbytes == target.numel() * target.element_size()
        ):
            stream.read_into(_writable_bytes(target))  # the one copy: straight into the target
            planner.commit_tensor(wanted[0], target)
            return
        buffer = torch.empty(stored.nbytes, dtype=torch.uint8)
        stream.read_into(_writable_bytes(buffer))
        saved = buffer.view(meta.dtype).as_strided(meta.shape, meta.stride(), meta.storage_offset())
        for request in wanted:
            piece = narrow_tensor_by_index(saved, request.storage_offsets, request.lengths)
            into = planner.resolve_tensor(request).detach()
            if into.size() != piece.size():
                raise AssertionError(
                    f"{request.storage_index}: stored {piece.size()}, expected {into.size()}"
                )
            into.copy_(piece)
            planner.commit_tensor(request, into)
