"""One rank's checkpoint file built in page-aligned memory, for an asynchronous save.

Each tensor is copied once, from training's tensor straight to its place among the
file's bytes; the CRC-32 is taken over that memory in one pass; the disk reads the file from
the same memory (direct_file.py). Writing through DCP's own writer instead costs two copies
(a staging copy, then torch.save's bytes into the direct file's buffer) and torch.save's
pieces one by one.

The copy can start before DCP has planned the save, in a thread of its own: each tensor goes
where the previous save placed it (`start_early_copy`). When the previous save placed every
tensor, or left it to another rank (DCP writes a replicated tensor from one rank only),
training is let go as soon as that copy is over, without waiting for DCP's plan (at several
ranks a collective of the background writers, at the writer's low priority); `build` then
takes each tensor's bytes from its early copy, moving them where the plan put them
elsewhere. A plan that gives this rank a tensor the copy left to another (a state whose
layout changed on some rank) abandons the save (`PlanChangedError`): its bytes as they were
are gone. Otherwise training is let go only after `build`, which copies what the early copy
did not.

The file stays DCP's own: each item is exactly what torch.save writes for it (a non-tensor
item: its bytes), at the offset and length the metadata records. Items start at multiples of
64 bytes; torch.save puts a tensor's bytes at a multiple of 64 inside its item, so every
tensor's place can be viewed as its own dtype. The gaps are zeros, which DCP skips.
"""

from __future__ import annotations

import io
import mmap
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, cast

import torch

from scaletrain.checkpoint.state import storage_of

ITEM_ALIGNMENT = 64
# torch.save writes its headers in pieces of a few hundred bytes, so a write this large can
# only be the data: where a tensor at least this large goes is found without writing it. A
# smaller one (Adam's step counts, biases, norms) is found by saving its layout twice.
IN_PLACE_MIN_BYTES = 4096


class PlanChangedError(RuntimeError):
    """DCP's plan for a save put a tensor that training was let go to change where the early
    copy had not copied it: the save cannot be written as the state was, and is abandoned."""


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
        # The tensors offered to the last early copy that the last build did not place:
        # another rank writes them. By the address of their data, with their layout.
        self._elsewhere: dict[int, tuple[Any, ...]] = {}
        self._offered: dict[int, tuple[Any, ...]] = {}  # to the early copy of this save
        # The early copy's places, by the address of the tensor's data.
        self._early: dict[int, _InPlace] = {}
        self._let_go = False  # whether training may change the offered tensors before build
        # One thread for the early copies of the whole run, started at the first: starting a
        # thread per save makes the step boundary wait until the new thread first runs.
        self._copier: ThreadPoolExecutor | None = None
        self._early_copy: Future[None] | None = None
        self._early_error: BaseException | None = None

    def start_early_copy(
        self, tensors: list[torch.Tensor], *, copied: Callable[[], None] = lambda: None
    ) -> None:
        """Copy `tensors` to where the last build placed the tensors at their addresses, in
        a thread, while DCP plans the save. When the last build placed each of them or left
        it to another rank, `copied` is called once the copy is over (from its thread), and
        training may change them from then on; otherwise, as for `build`'s own copies, not
        until `build` returns."""
        self.wait_for_early_copy()
        self._early, self._early_error = {}, None  # a failed save's copies count for nothing
        self._offered = {}
        tensors = [tensor for tensor in tensors if tensor.numel()]  # no bytes, no address
        early, left = [], 0
        for tensor in tensors:
            address = tensor.data_ptr()
            layout = self._offered[address] = _layout_of(tensor)
            at, placed_layout, form = self._places.get(address, (0, None, None))
            if form is not None and placed_layout == layout:
                early.append(_InPlace(source=tensor, layout=layout, form=form, at=at))
            elif self._elsewhere.get(address) == layout:
                left += 1
        self._let_go = len(early) + left == len(tensors)
        if not early:
            if self._let_go:
                copied()
            return
        if self._copier is None:
            self._copier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-copy")
        self._early_copy = self._copier.submit(
            self._copy_early, early, copied if self._let_go else None
        )

    def _copy_early(self, early: list[_InPlace], copied: Callable[[], None] | None) -> None:
        assert self._memory is not None
        try:
            for place in early:
                _view(self._memory, place.at, place.form).copy_(place.source)
                self._early[place.source.data_ptr()] = place
        except BaseException as error:  # raised again by build, in the writer's thread
            self._early_error = error
            return
        if copied is not None:
            copied()

    def wait_for_early_copy(self) -> None:
        """Block until the early copy (if any) is over; its error is raised by `build`."""
        if self._early_copy is not None:
            self._early_copy.result()  # _copy_early keeps its error for build
            self._early_copy = None

    def end_early_copy(self) -> None:
        """Wait for the early copy and forget it, whatever became of its save: its bytes
        belong to that save's build alone (one that failed before it leaves nothing behind)."""
        self.wait_for_early_copy()
        self._early, self._early_error, self._offered, self._let_go = {}, None, {}, False

    def build(
        self, items: Iterable[Any], resolve: Callable[[Any], Any]
    ) -> tuple[list[PlacedItem], memoryview]:
        """Every item's place and the file's bytes (page-aligned at their start). `resolve`
        gives an item's data: a BytesIO, or a tensor on any device; once this returns, the
        tensors are copied and training may change them."""
        offered, self._offered = self._offered, {}
        # Until this build is over, nothing is predicted of the next save: a failed one
        # leaves its next save to wait for its build.
        self._places, self._elsewhere = {}, {}
        placed: list[PlacedItem] = []
        pieces: list[tuple[int, bytes]] = []
        in_place: list[_InPlace] = []
        whole_items: list[torch.Tensor] = []  # tensors serialized whole, data and all
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
                    whole_items.append(tensor)
                    length = _serialize_whole(tensor, offset, pieces)
                else:
                    pieces += [(offset + start, content) for start, content in form.pieces]
                    in_place.append(
                        _InPlace(source=tensor, layout=layout, form=form, at=offset + at)
                    )
                    length = form.length
            else:
                whole_items.append(tensor)
                length = _serialize_whole(tensor, offset, pieces)
            placed.append(PlacedItem(item=item, offset=offset, length=length))
            end = offset + length
        # Laid out while the early copy runs; the memory is written once it is over.
        self.wait_for_early_copy()
        early, self._early = self._early, {}
        let_go, self._let_go = self._let_go, False
        if self._early_error is not None:
            error, self._early_error = self._early_error, None
            raise error
        if let_go:
            _check_early_copies(whole_items, in_place, early, offered)
        from_gpu = any(place.source.is_cuda for place in in_place)
        earlier_memory = self._memory
        owner, memory = self._take(end, pinned=self._pin and from_gpu)
        # Each tensor's bytes come from its early copy, where there is one: training may
        # have changed the tensor since. Bytes the plan moved are taken out before the
        # memory is rewritten; in new memory, the earlier memory is left as it was.
        sources: list[torch.Tensor | None] = []
        for place in in_place:
            copy = early.get(place.source.data_ptr())
            if copy is None or copy.layout != place.layout:
                sources.append(place.source)
            elif memory is not earlier_memory:
                assert earlier_memory is not None  # there was an early copy
                sources.append(_view(earlier_memory, copy.at, copy.form))
            elif copy.at != place.at:
                sources.append(_view(memory, copy.at, copy.form).clone())
            else:
                sources.append(None)  # already in its place
        whole = memoryview(owner)
        filled = [(at, at + len(content)) for at, content in pieces]
        filled += [(place.at, place.at + place.form.data_bytes) for place in in_place]
        for start, stop in _gaps(sorted(filled), len(whole)):
            memory[start:stop].zero_()  # earlier saves' bytes: zeros, as DCP's
        for at, content in pieces:
            whole[at : at + len(content)] = content
        for place, source in zip(in_place, sources, strict=True):
            if source is not None:
                _view(memory, place.at, place.form).copy_(source)
        self._places = {
            place.source.data_ptr(): (place.at, place.layout, place.form) for place in in_place
        }
        self._elsewhere = {
            address: layout for address, layout in offered.items() if address not in self._places
        }
        return placed, whole[:end]

    def _take(self, size: int, *, pinned: bool) -> tuple[mmap.mmap, torch.Tensor]:
        """Page-aligned memory for `size` bytes: the previous save's when large enough."""
        rounded = max(mmap.PAGESIZE, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        if self._owner is None or self._memory is None or len(self._owner) < rounded:
            self._release()
            self._owner = mmap.mmap(-1, rounded)  # anonymous memory starts at a page
            self._memory = torch.frombuffer(self._owner, dtype=torch.uint8)
        if pinned and not self._pinned:
            # Page-locked, as torch's own staging does: the GPU copies into it at full speed.
            # Written from CUDA's documentation; no GPU has run it (docs/checkpoints.md).
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
        self._places, self._elsewhere = {}, {}  # a later save predicts nothing
        self._release()

    def _release(self) -> None:
        if self._pinned and self._memory is not None:
            _cuda_runtime().cudaHostUnregister(self._memory.data_ptr())
        self._pinned = False
        self._owner = self._memory = None  # freed once no view of it is left


def _view(memory: torch.Tensor, at: int, form: _SavedForm) -> torch.Tensor:
    """The place at `at` in the memory, viewed as a tensor of its saved form."""
    target = memory[at : at + form.data_bytes].view(form.dtype)
    return target.as_strided(form.shape, form.stride)


def _check_early_copies(
    whole_items: list[torch.Tensor],
    in_place: list[_InPlace],
    early: dict[int, _InPlace],
    offered: dict[int, tuple[Any, ...]],
) -> None:
    """After training was let go at the end of the early copy, every tensor of the plan that
    was offered to it must be in the file as the copy took it: its bytes then are gone."""
    for tensor in whole_items:
        if storage_of(tensor) in offered:  # a sparse tensor has no address: None
            raise PlanChangedError(
                "the plan serializes whole a tensor that training went on changing after the "
                "early copy"
            )
    for place in in_place:
        address = place.source.data_ptr()
        if address not in offered:
            continue
        copy = early.get(address)
        if copy is None:
            raise PlanChangedError(
                "the plan gives this rank a tensor the early copy left to another rank "
                "(the state's layout changed since the last save)"
            )
        if copy.layout != place.layout:
            raise PlanChangedError(
                f"the plan views a tensor copied early with another layout ({copy.layout} "
                f"copied, {place.layout} planned)"
            )


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
