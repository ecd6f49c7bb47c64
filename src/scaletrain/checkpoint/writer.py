"""Write one checkpoint from all ranks, then publish it atomically; optionally in the background.

Order, so that a crash at any moment leaves the previous checkpoint loadable:
1. every rank writes its DCP shard files into step-N.partial/, its random generators packed
   into the same files (no small file per rank), each file's size and CRC-32 computed on
   the way to the disk, each file fsynced once (an asynchronous save: one file per rank,
   built in memory and written from there, file_image.py);
2. rank 0 writes DCP's .metadata only once every rank's shards are on disk, and has every
   file's digest (shard_saver.py: DCP's own save, or the last save's plan again);
3. rank 0 writes the digests into checkpoint.json (fsynced), fsyncs the folder, renames it
   to step-N, points LATEST at it (one fsync of the checkpoints folder), then applies
   retention.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from scaletrain import __version__
from scaletrain.checkpoint.file_image import FileImage, PlanChangedError
from scaletrain.checkpoint.layout import CheckpointStore, fsync_folder
from scaletrain.checkpoint.manifest import Manifest, Position
from scaletrain.checkpoint.process_switches import (
    without_automatic_gc,
    without_record_checksums,
)
from scaletrain.checkpoint.shard_saver import ShardSaver
from scaletrain.checkpoint.state import local_part, storage_of
from scaletrain.checkpoint.storage import (
    ScaletrainWriter,
    state_bytes,
    tensor_bytes,
    writer_options,
)

# A synchronous save of a state of many small tensors is built as a file image too
# (file_image.py), in memory taken for the save: DCP's own writer runs torch.save for every
# tensor, about 0.2 ms each, which was most of a save of 2,400 tensors of 6 KB. But memory
# taken for one save costs its page faults, per MB: a state of
# 201 MB in 32 tensors stalled training 0.22-0.25 s built so, 0.17-0.20 s through
# DCP's writer (docs/checkpoints.md, "Many small tensors"). A state larger than
# SYNC_IMAGE_MAX_BYTES never is: DCP's writer needs no memory for all of it.
SYNC_IMAGE_MAX_BYTES = 512 * 2**20
SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES = 2**20

# The DCP entry of each rank's random generators: {"<rank>": JSON text}. Plain text, so that
# loading it needs no unpickling beyond torch.load(weights_only=True).
RANK_STATE_KEY = "rank_state"
# The background writer's niceness (Linux: per thread): the training loop's threads win
# every contended core, the write takes what is left.
WRITER_NICENESS = 10


@dataclass(frozen=True, kw_only=True, slots=True)
class SaveJob:
    """Everything one rank contributes to one checkpoint."""

    position: Position
    reason: str
    state: dict[str, Any]
    """The DCP state dict (model, optimizer, extras)."""
    rank_state: dict[str, Any]
    """This rank's random generators (state.capture_rank_state)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SaveTarget:
    """Where and with whom to save: the same for every job of a run."""

    store: CheckpointStore
    rank: int
    world_size: int
    group: dist.ProcessGroup | None
    """The group for checkpoint collectives (None: the default group; see checkpointer.py)."""
    keep: int
    device: torch.device
    """This rank's device: the background writer's thread works on it too."""
    cores: int
    """This rank's cores: they bound the writer threads of a synchronous save."""


# A tensor left for the writer thread to copy: its place in the staged state, and the tensor.
Deferred = tuple[dict[Any, Any], Any, torch.Tensor]


def stage(
    state: Any,
    into: Any = None,
    *,
    pin: bool = True,
    later: frozenset[int] = frozenset(),
    deferred: list[Deferred] | None = None,
) -> Any:
    """A private CPU copy of a state dict, so that training can go on changing the original.

    Tensors are copied into the buffers of `into` (the previous copy, already written) when
    their shapes match: no new memory to fault in at every save. New buffers for GPU tensors
    are pinned (page-locked) when `pin`, for a fast device-to-host copy; torch's caching
    host allocator rounds each one up to a power of two (docs/checkpoints.md, "Memory").

    Tensors of a dict whose data is at an address in `later` are not copied: their place is
    left empty and appended to `deferred` (the writer thread copies them into the file).
    """
    if type(state) is torch.Tensor:  # DTensor and other subclasses: copied by their own rules
        same = isinstance(into, torch.Tensor) and (into.shape, into.dtype) == (
            state.shape,
            state.dtype,
        )
        pinned = pin and state.is_cuda
        buffer = into if same else torch.empty_like(state, device="cpu", pin_memory=pinned)
        return buffer.copy_(state.detach())
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        earlier = into if isinstance(into, dict) else {}
        staged: dict[Any, Any] = {}
        for key, value in state.items():
            if deferred is not None and storage_of(value) in later:
                staged[key] = None
                deferred.append((staged, key, value))
            else:
                staged[key] = stage(
                    value, earlier.get(key), pin=pin, later=later, deferred=deferred
                )
        return staged
    if isinstance(state, list | tuple):
        same_length = isinstance(into, list | tuple) and len(into) == len(state)
        return type(state)(
            stage(value, old, pin=pin, later=later, deferred=deferred)
            for value, old in itertools.zip_longest(state, into if same_length else ())
        )
    return copy.deepcopy(state)


def write_checkpoint(
    job: SaveJob,
    target: SaveTarget,
    shards: ShardSaver,
    *,
    image: FileImage | None = None,
    copied: Callable[[], None] = lambda: None,
) -> Path | None:
    """Save `job` from every rank (a collective) with `shards`, the run's shard saver;
    return the published folder on rank 0.

    With an `image` (an asynchronous save), this rank's file is built in it, by this one
    thread, and `copied` is called once the tensors of the state are copied there.
    """
    started = time.perf_counter()
    folder = target.store.partial(job.position.step)
    folder.mkdir(parents=True, exist_ok=True)
    options = writer_options(state_bytes(job.state), target.cores, staged=image is not None)
    writer = ScaletrainWriter(folder, options, image=image, copied=copied)
    state = {**job.state, RANK_STATE_KEY: {str(target.rank): json.dumps(job.rank_state)}}
    with without_record_checksums(), without_automatic_gc():
        files = shards.save(state, writer)
    if target.rank != 0:
        return None
    Manifest(
        position=job.position,
        world_size=target.world_size,
        reason=job.reason,
        saved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=dict(sorted(files.items())),
        versions={"scaletrain": __version__, "torch": torch.__version__},
    ).write(folder)
    fsync_folder(folder)  # every rank's files and the manifest, before the folder is renamed
    published = target.store.publish(job.position.step)
    target.store.prune(target.keep)
    seconds = time.perf_counter() - started
    size = sum(file.size for file in files.values())
    print(
        f"scaletrain: saved checkpoint {published} ({job.reason}; {size / 1e6:,.1f} MB in "
        f"{seconds:.2f} s)",
        file=sys.stderr,
        flush=True,
    )
    return published


def _many_small_tensors(state: Any) -> bool:
    """Whether a synchronous save of `state` is built as a file image (SYNC_IMAGE_MAX_*)."""
    sizes = tensor_bytes(state)
    return sum(sizes) <= min(SYNC_IMAGE_MAX_BYTES, len(sizes) * SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES)


def _prepare_writer_thread(device: torch.device) -> None:
    """The background writer's thread: on this rank's GPU (a CUDA call there would otherwise
    create a context on GPU 0), and behind training in the CPU scheduler's queue."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Not Linux, or not allowed: the thread writes at normal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)


class BackgroundWriter:
    """Writes checkpoints in a background thread, one at a time (asynchronous saving).

    What only `optimizer.step()` changes (the parameters it updates and its own state) is
    copied in the background too, straight into the file's bytes in memory, while the next
    forward and backward run: from the second save on, in a thread of its own started at
    once (file_image.py, the early copy); `before_step`, an optimizer step pre-hook, makes
    the next step wait for that copy. Everything else (buffers, which forward changes;
    schedulers; plain values) is copied at the step boundary.
    """

    def __init__(self, target: SaveTarget, *, pin_staging: bool = True) -> None:
        self.target = target
        self._pin = pin_staging
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="checkpoint",
            initializer=_prepare_writer_thread,
            initargs=(target.device,),
        )
        self._pending: Future[Path | None] | None = None
        self._staged: Any = None
        self._image = FileImage(pin=pin_staging)
        # A synchronous save's, given back after each save. Never page-locked: registering
        # memory with the GPU driver takes time in proportion to its size, for one copy.
        self._image_once = FileImage(pin=False)
        # Every save of the run, synchronous or not, plans with it: a save of the same layout
        # as the last one's reuses its plan.
        self._shards = ShardSaver(
            rank=target.rank, world_size=target.world_size, group=target.group
        )
        self._copied: threading.Event | None = None
        self.waited_for_copy_s = 0.0
        """Seconds optimizer steps waited for a background copy, over the run."""

    def submit(self, job: SaveJob, *, later: frozenset[int] = frozenset()) -> None:
        """Copy the state to CPU memory, write it in the background. Tensors whose data is
        at an address in `later` are copied in the background too, before the write; call
        `before_step` before anything changes them."""
        self.wait()  # also frees the previous copy's buffers for reuse
        deferred: list[Deferred] = []
        self._staged = stage(
            job.state, into=self._staged, pin=self._pin, later=later, deferred=deferred
        )
        copied = self._copied = threading.Event() if deferred else None
        done = copied.set if copied is not None else lambda: None
        # Their copy starts now, to the places of the previous save, while the writer has DCP
        # plan the save: from this thread, so that it copies at training's priority (the
        # next optimizer step waits for it) rather than at the writer's. When it covers them
        # all, the next step waits for that copy alone, not for the plan.
        self._image.start_early_copy(
            [local_part(tensor).detach() for _, _, tensor in deferred],
            copied=done,
        )
        self._pending = self._executor.submit(
            self._copy_and_write, replace(job, state=self._staged), deferred, done
        )

    def write_now(self, job: SaveJob, *, keep_image: bool) -> None:
        """Save `job` from this thread: a synchronous save. Its file is built in memory, as
        an asynchronous save's is: in the asynchronous saves' image when it is kept for
        those anyway (`keep_image`), else, for a state of many small tensors, in memory
        given back after the save. Other states go through DCP's own writer."""
        self.wait()
        if keep_image:
            write_checkpoint(job, self.target, self._shards, image=self._image)
        elif _many_small_tensors(job.state):
            try:
                write_checkpoint(job, self.target, self._shards, image=self._image_once)
            finally:
                self._image_once.release()
        else:
            write_checkpoint(job, self.target, self._shards)

    def _copy_and_write(
        self, job: SaveJob, deferred: list[Deferred], done: Callable[[], None]
    ) -> Path | None:
        """`done` tells the next optimizer step that the state is copied."""
        # The file is built from training's own tensors where the copy was deferred; their
        # places are emptied again after, so that the next save never stages into them.
        for container, key, tensor in deferred:
            container[key] = tensor
        try:
            return write_checkpoint(job, self.target, self._shards, image=self._image, copied=done)
        except CheckpointException as error:
            reasons = [failure for failure, _ in error.failures.values()]
            if not reasons or not all(isinstance(reason, PlanChangedError) for reason in reasons):
                raise
            self._abandon(job, str(reasons[0]))
            return None
        finally:
            self._image.end_early_copy()  # also when the save failed before the file's build
            done()  # also when the save failed before the copy: the error comes with wait()
            for container, key, _ in deferred:
                container[key] = None

    def _abandon(self, job: SaveJob, reason: str) -> None:
        """Training went on before the save's plan was known, and the plan needs a tensor as
        it was then (file_image.py): every rank gives the save up; the previous checkpoint
        stays, and the next save waits for its plan."""
        if self.target.rank != 0:
            return
        shutil.rmtree(self.target.store.partial(job.position.step), ignore_errors=True)
        print(
            f"scaletrain: checkpoint of step {job.position.step} abandoned: {reason}. "
            "Training goes on from where it is; the previous checkpoint stays, and the next "
            "save waits for its plan.",
            file=sys.stderr,
            flush=True,
        )

    def before_step(self, *_: object) -> None:
        """An optimizer step pre-hook: wait until the background copy of the state it is
        about to change is complete (at once when there is none)."""
        copied = self._copied
        if copied is None:
            return
        if not copied.is_set():
            started = time.perf_counter()
            copied.wait()
            self.waited_for_copy_s += time.perf_counter() - started
        self._copied = None

    @property
    def in_flight(self) -> bool:
        """True while a save is being written."""
        return self._pending is not None and not self._pending.done()

    def wait(self) -> None:
        """Block until the save in flight (if any) is published; re-raise its error."""
        pending, self._pending = self._pending, None
        self._copied = None
        if pending is not None:
            pending.result()
