"""One rank's checkpoint file built in page-aligned memory, for an asynchronous save.

Each tensor is copied once, from training's tensor straight to its place among the
file's bytes; the CRC-32 is taken over that memory in one pass; the disk reads the file from
the same memory (direct_file.py). Writing through DCP's own writer instead costs two copies
(a staging copy, then torch.save's bytes into the direct file's buffer) and torch.save's
pieces one by one: measured in docs/checkpoints.md ("Where an asynchronous save's slowdown
comes from").

The copy can start before DCP has planned the save, in a thread of its own: each tensor goes
where the previous save placed it (`start_early_copy`), and `build` then copies only what the
plan put elsewhere. Training is let go only after `build`, so a plan that changed costs a
second copy, never a wrong byte.

The file stays DCP's own: each item is exactly what torch.save writes for it (a non-tensor
item: its bytes), at the offset and length the metadata records. Items start at multiples of
64 bytes; torch.save puts a tensor's bytes at a multiple of 64 inside its item, so every
tensor's place can be viewed as its own dtype. The gaps are zeros, which DCP skips.
"""

from __future__ import annotations

import io
import mmap
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, cast

import torch

ITEM_ALIGNMENT = 64
# torch.save writes its headers in pieces of a few hundred bytes, so a write this large can
# only be the data: where a tensor at least this large goes is found without writing it. A
# smaller one (Adam's step counts, biases, norms) is found by saving its layout twice.
IN_PLACE_MIN_BYTES = 4096


class _Pieces(io.RawIOBase):
    """What torch.save writes, kept as (offset, bytes) pieces; one write of exactly
    `gap_bytes` (the storage's data) is left out and its offset kept. torch.save writes a
    file in a few dozen small writes; writes that follow each other are joined into one
    piece, so that a file image handles a piece or two per tensor rather than dozens."""

    def __init__(self, gap_bytes: int | None = None) -> None:
        super().__init__()
        self._runs: list[tuple[int, bytearray]] = []
        self._joining = False  # whether the next write continues the last run
        self.size = 0
        self.gap_at: int | None = None
        self._gap_bytes = gap_bytes

    @property
    def pieces(self) -> list[tuple[int, bytes]]:
        return [(at, bytes(run)) for at, run in self._runs]

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.gap_at is None and len(view) == self._gap_bytes:
            self.gap_at = self.size  # no header piece is as large (IN_PLACE_MIN_BYTES)
            self._joining = False
        elif self._joining:
            self._runs[-1][1].extend(view)
        else:
            self._runs.append((self.size, bytearray(view)))
            self._joining = True
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
    layout: tuple[Any, ...]
    """The source's dtype, shape and strides."""
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
        # The last build's tensor places (offset, layout, form), by the address of their data.
        self._places: dict[int, tuple[int, tuple[Any, ...], _SavedForm]] = {}
        self._early: set[tuple[int, int, tuple[Any, ...]]] = set()  # (address, at, layout)
        self._early_copy: threading.Thread | None = None
        self._early_error: BaseException | None = None

    def start_early_copy(self, tensors: list[torch.Tensor]) -> None:
        """Copy `tensors` to where the last build placed the tensors at their addresses, in
        a thread, while DCP plans the save. As for `build`'s own copies, training must not
        change them until `build` returns."""
        self.wait_for_early_copy()
        self._early, self._early_error = set(), None  # a failed save's copies count for nothing
        early = []
        for tensor in tensors:
            at, layout, form = self._places.get(tensor.data_ptr(), (0, None, None))
            if form is not None and layout == _layout_of(tensor):
                early.append(_InPlace(source=tensor, layout=layout, form=form, at=at))
        if early and self._memory is not None:
            self._early_copy = threading.Thread(
                target=self._copy_early, args=(early,), name="checkpoint-copy"
            )
            self._early_copy.start()

    def _copy_early(self, early: list[_InPlace]) -> None:
        try:
            for place in early:
                self._target(place).copy_(place.source)
                self._early.add((place.source.data_ptr(), place.at, place.layout))
        except BaseException as error:  # raised again by build, in the writer's thread
            self._early_error = error

    def wait_for_early_copy(self) -> None:
        """Block until the early copy (if any) is over; its error is raised by `build`."""
        if self._early_copy is not None:
            self._early_copy.join()
            self._early_copy = None

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
                layout = _layout_of(tensor)
                form = self._forms[layout] = forms.get(layout) or _saved_form(tensor)
                at = form.data_at
                if at is None or (offset + at) % tensor.element_size():
                    length = _serialize_whole(tensor, offset, pieces)
                else:
                    pieces += [(offset + start, content) for start, content in form.pieces]
                    in_place.append(
                        _InPlace(source=tensor, layout=layout, form=form, at=offset + at)
                    )
                    length = form.length
            else:
                length = _serialize_whole(tensor, offset, pieces)
            placed.append(PlacedItem(item=item, offset=offset, length=length))
            end = offset + length
        # Laid out while the early copy runs; the memory is written once it is over.
        self.wait_for_early_copy()
        early, self._early = self._early, set()
        if self._early_error is not None:
            error, self._early_error = self._early_error, None
            raise error
        from_gpu = any(place.source.is_cuda for place in in_place)
        earlier_memory = self._memory
        owner, memory = self._take(end, pinned=self._pin and from_gpu)
        if memory is not earlier_memory:
            early = set()  # copied into memory that is gone
        whole = memoryview(owner)
        filled = [(at, at + len(content)) for at, content in pieces]
        filled += [(place.at, place.at + place.form.data_bytes) for place in in_place]
        for start, stop in _gaps(sorted(filled), len(whole)):
            memory[start:stop].zero_()  # earlier saves' bytes: zeros, as DCP's
        for at, content in pieces:
            whole[at : at + len(content)] = content
        for place in in_place:
            if (place.source.data_ptr(), place.at, place.layout) not in early:
                self._target(place).copy_(place.source)
        self._places = {
            place.source.data_ptr(): (place.at, place.layout, place.form) for place in in_place
        }
        return placed, whole[:end]

    def _target(self, place: _InPlace) -> torch.Tensor:
        """The tensor's place in the memory, viewed as its saved form."""
        assert self._memory is not None
        form = place.form
        target = self._memory[place.at : place.at + form.data_bytes].view(form.dtype)
        return target.as_strided(form.shape, form.stride)

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

    @property
    def memory_bytes(self) -> int:
        """How much memory the image holds now."""
        return len(self._owner) if self._owner is not None else 0

    def release(self) -> None:
        """Give the memory back (a later build takes new memory)."""
        self.wait_for_early_copy()
        self._places = {}
        self._release()

    def _release(self) -> None:
        if self._pinned and self._memory is not None:
            _cuda_runtime().cudaHostUnregister(self._memory.data_ptr())
        self._pinned = False
        self._owner = self._memory = None  # freed once no view of it is left


def _copied_in_place(data: torch.Tensor) -> bool:
    """Whether a tensor gets a place to be copied into: a plain, dense one. Quantized
    tensors and tensor subclasses keep torch.save's own way of writing them."""
    return type(data) is torch.Tensor and data.layout == torch.strided and not data.is_quantized


def _layout_of(tensor: torch.Tensor) -> tuple[Any, ...]:
    return (tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


def _cuda_runtime() -> Any:
    return torch.cuda.cudart()  # type: ignore[no-untyped-call]


def _saved_form(tensor: torch.Tensor) -> _SavedForm:
    """How torch.save writes `tensor` as DCP hands it over (a CPU tensor whose storage is
    exactly its bytes, strides kept where dense), worked out on a tensor of the same layout
    that is never written to: torch.save reads only its layout here (record checksums are
    off while DCP saves), and its data is the one piece left out."""
    template = torch.empty_like(tensor, device="cpu")
    data_bytes = template.untyped_storage().nbytes()
    if data_bytes < IN_PLACE_MIN_BYTES:
        return _small_saved_form(template)
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


def _small_saved_form(template: torch.Tensor) -> _SavedForm:
    """`_saved_form` of a small tensor, whose data could be as large as a header piece: the
    layout is saved twice, its bytes all 0x00 and then all 0xFF, and the data is the one run
    of bytes that differs. Anything else differing (record checksums switched on) leaves the
    data's place unknown, and the tensor is then serialized whole."""
    data_bytes = template.untyped_storage().nbytes()
    as_bytes = torch.empty(0, dtype=torch.uint8).set_(template.untyped_storage())
    files = []
    for fill in (0x00, 0xFF):
        as_bytes.fill_(fill)
        stream = _Pieces()
        torch.save(template, cast(IO[bytes], stream))
        files.append(b"".join(content for _, content in stream.pieces))
    zeros, ones = files
    same_length = len(zeros) == len(ones)
    pairs = zip(zeros, ones, strict=False)
    differ = [at for at, (one, other) in enumerate(pairs) if one != other] if same_length else []
    one_run = len(differ) == data_bytes > 0 and differ[-1] - differ[0] == data_bytes - 1
    data_at = differ[0] if one_run else None
    pieces = [(0, zeros)]
    if data_at is not None:
        after = data_at + data_bytes
        pieces = [(0, zeros[:data_at]), (after, zeros[after:])]
    return _SavedForm(
        dtype=template.dtype,
        shape=template.shape,
        stride=template.stride(),
        data_bytes=data_bytes,
        pieces=[(at, content) for at, content in pieces if content],
        data_at=data_at,
        length=len(zeros),
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
