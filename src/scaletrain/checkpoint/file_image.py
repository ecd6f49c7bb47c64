"""One rank's checkpoint file built in page-aligned memory, for an asynchronous save.

Each large tensor is copied once, from training's tensor straight to its place among the
file's bytes; the CRC-32 is taken over that memory in one pass; the disk reads the file from
the same memory (direct_file.py). Writing through DCP's own writer instead costs two copies
(a staging copy, then torch.save's bytes into the direct file's buffer) and torch.save's
pieces one by one: measured in docs/checkpoints.md ("Where an asynchronous save's slowdown
comes from").

The file stays DCP's own: each item is exactly what torch.save writes for it (a non-tensor
item: its bytes), at the offset and length the metadata records. Items start at multiples of
64 bytes; torch.save puts a tensor's bytes at a multiple of 64 inside its item, so every
tensor's place can be viewed as its own dtype. The gaps are zeros, which DCP skips.
"""

from __future__ import annotations

import io
import mmap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, cast

import torch

ITEM_ALIGNMENT = 64
# A tensor at least this large gets a place in the file to be copied into; a smaller one
# (Adam's step counts) is serialized whole by torch.save, data and all. torch.save writes
# its headers in pieces of a few hundred bytes, so a piece this large can only be the data.
IN_PLACE_MIN_BYTES = 4096


class _Pieces(io.RawIOBase):
    """What torch.save writes, kept as (offset, bytes) pieces; one write of exactly
    `gap_bytes` (the storage's data) is left out and its offset kept."""

    def __init__(self, gap_bytes: int | None = None) -> None:
        super().__init__()
        self.pieces: list[tuple[int, bytes]] = []
        self.size = 0
        self.gap_at: int | None = None
        self._gap_bytes = gap_bytes

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.gap_at is None and len(view) == self._gap_bytes:
            self.gap_at = self.size  # no header piece is as large (IN_PLACE_MIN_BYTES)
        else:
            self.pieces.append((self.size, bytes(view)))
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size


@dataclass(frozen=True, kw_only=True, slots=True)
class PlacedItem:
    """One item's place in the file."""

    item: Any
    """DCP's WriteItem."""
    offset: int
    length: int


@dataclass(frozen=True, kw_only=True, slots=True)
class _SavedForm:
    """What torch.save writes for a CPU tensor of one dtype, shape and strides, its data
    left out: the same for every tensor of that layout, so worked out once per run."""

    dtype: torch.dtype
    shape: torch.Size
    stride: tuple[int, ...]
    data_bytes: int
    pieces: list[tuple[int, bytes]]
    """Everything but the data, at offsets from the item's start."""
    data_at: int | None
    """Where the data goes; None: torch.save wrote no single piece of its size."""
    length: int


@dataclass(frozen=True, kw_only=True, slots=True)
class _InPlace:
    """A tensor to copy into the file at `at`, laid out as its saved `form`."""

    source: torch.Tensor
    form: _SavedForm
    at: int


class FileImage:
    """The bytes of one file, built from DCP's write items, in memory reused between saves;
    page-locked for a copy from the GPU when `pin`."""

    def __init__(self, *, pin: bool = True) -> None:
        self._pin = pin
        self._owner: mmap.mmap | None = None
        self._memory: torch.Tensor | None = None  # the same memory, as uint8
        self._pinned = False
        self._forms: dict[tuple[Any, ...], _SavedForm] = {}

    def build(
        self, items: Iterable[Any], resolve: Callable[[Any], Any]
    ) -> tuple[list[PlacedItem], memoryview]:
        """Every item's place and the file's bytes (page-aligned at their start). `resolve`
        gives an item's data: a BytesIO, or a tensor on any device; once this returns, the
        tensors are copied and training may change them."""
        placed: list[PlacedItem] = []
        pieces: list[tuple[int, bytes]] = []
        in_place: list[_InPlace] = []
        forms, self._forms = self._forms, {}  # only the layouts of this save are kept
        end = 0
        for item in items:
            offset = -(-end // ITEM_ALIGNMENT) * ITEM_ALIGNMENT
            data = resolve(item)
            if isinstance(data, io.BytesIO):
                pieces.append((offset, bytes(data.getbuffer())))
                length = len(pieces[-1][1])
            elif _copied_in_place(tensor := data.detach()):
                key = (tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))
                form = self._forms[key] = forms.get(key) or _saved_form(tensor)
                at = form.data_at
                if at is None or (offset + at) % tensor.element_size():
                    length = _serialize_whole(tensor, offset, pieces)
                else:
                    pieces += [(offset + start, content) for start, content in form.pieces]
                    in_place.append(_InPlace(source=tensor, form=form, at=offset + at))
                    length = form.length
            else:
                length = _serialize_whole(tensor, offset, pieces)
            placed.append(PlacedItem(item=item, offset=offset, length=length))
            end = offset + length
        from_gpu = any(place.source.is_cuda for place in in_place)
        owner, memory = self._take(end, pinned=self._pin and from_gpu)
        whole = memoryview(owner)
        filled = [(at, at + len(content)) for at, content in pieces]
        filled += [(place.at, place.at + place.form.data_bytes) for place in in_place]
        for start, stop in _gaps(sorted(filled), len(whole)):
            memory[start:stop].zero_()  # earlier saves' bytes: zeros, as DCP's
        for at, content in pieces:
            whole[at : at + len(content)] = content
        for place in in_place:
            form = place.form
            target = memory[place.at : place.at + form.data_bytes].view(form.dtype)
            target.as_strided(form.shape, form.stride).copy_(place.source)
        return placed, whole[:end]

    def _take(self, size: int, *, pinned: bool) -> tuple[mmap.mmap, torch.Tensor]:
        """Page-aligned memory for `size` bytes: the previous save's when large enough."""
        rounded = max(mmap.PAGESIZE, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        if self._owner is None or self._memory is None or len(self._owner) < rounded:
            self._release()
            self._owner = mmap.mmap(-1, rounded)  # anonymous memory starts at a page
            self._memory = torch.frombuffer(self._owner, dtype=torch.uint8)
        if pinned and not self._pinned:
            # Page-locked, as torch's own staging does (torch.cuda._pin_memory_utils): the
            # GPU copies into it at full speed. Written from CUDA's documentation; no GPU
            # has run it (docs/checkpoints.md).
            address, size = self._memory.data_ptr(), len(self._owner)
            # 1: cudaHostRegisterPortable. Not pinned (an error code, or a torch build whose
            # runtime bindings lack it): the copy is slower, not wrong.
            try:
                self._pinned = int(_cuda_runtime().cudaHostRegister(address, size, 1)) == 0
            except (AttributeError, RuntimeError):
                self._pinned = False
        return self._owner, self._memory

    def _release(self) -> None:
        if self._pinned and self._memory is not None:
            _cuda_runtime().cudaHostUnregister(self._memory.data_ptr())
        self._pinned = False
        self._owner = self._memory = None  # freed once no view of it is left


def _copied_in_place(data: torch.Tensor) -> bool:
    """Whether a tensor gets a place to be copied into: a plain, dense one, large enough.
    Quantized tensors and tensor subclasses keep torch.save's own way of writing them."""
    return (
        type(data) is torch.Tensor
        and data.layout == torch.strided
        and not data.is_quantized
        and data.nbytes >= IN_PLACE_MIN_BYTES
    )


def _cuda_runtime() -> Any:
    return torch.cuda.cudart()  # type: ignore[no-untyped-call]


def _saved_form(tensor: torch.Tensor) -> _SavedForm:
    """How torch.save writes `tensor` as DCP hands it over (a CPU tensor whose storage is
    exactly its bytes, strides kept where dense), worked out on a tensor of the same layout
    that is never written to: torch.save reads only its layout here (record checksums are
    off while DCP saves), and its data is the one piece left out."""
    template = torch.empty_like(tensor, device="cpu")
    data_bytes = template.untyped_storage().nbytes()
    stream = _Pieces(gap_bytes=data_bytes)
    torch.save(template, cast(IO[bytes], stream))
    return _SavedForm(
        dtype=template.dtype,
        shape=template.shape,
        stride=template.stride(),
        data_bytes=data_bytes,
        pieces=stream.pieces,
        data_at=stream.gap_at,
        length=stream.size,
    )


def _serialize_whole(tensor: torch.Tensor, offset: int, pieces: list[tuple[int, bytes]]) -> int:
    """torch.save's bytes for `tensor`, data and all, placed at `offset`; their length."""
    whole = tensor.cpu()
    if whole.untyped_storage().nbytes() != whole.nbytes:
        whole = whole.clone()  # torch.save writes a tensor's whole storage
    stream = _Pieces()
    torch.save(whole, cast(IO[bytes], stream))
    pieces += [(offset + start, content) for start, content in stream.pieces]
    return stream.size


def _gaps(filled: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The ranges of [0, size) that no sorted, non-overlapping range of `filled` covers."""
    gaps, position = [], 0
    for start, stop in filled:
        if start > position:
            gaps.append((position, start))
        position = max(position, stop)
    if position < size:
        gaps.append((position, size))
    return gaps
