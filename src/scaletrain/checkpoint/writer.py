"""Write one checkpoint from all ranks, then publish it atomically; optionally in the background.

Order, so that a crash at any moment leaves the previous checkpoint loadable:
1. every rank writes its DCP files into step-N.partial/ through the run's storage
   (storage.py), its random generators inside them (no small file per rank), and has each
   file's size and CRC-32;
2. rank 0 writes DCP's .metadata once every rank's files are on disk (DCP's save does) and
   gathers every file's digest;
3. rank 0 writes the digests into checkpoint.json (fsynced), fsyncs the folder, renames it
   to step-N, points LATEST at it (one fsync of the checkpoints folder), then applies
   retention.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from scaletrain import __version__
from scaletrain.checkpoint.layout import CheckpointStore, fsync_folder
from scaletrain.checkpoint.manifest import FileDigest, Manifest, Position

if TYPE_CHECKING:
    from scaletrain.checkpoint.storage import Storage

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
    """This rank's cores."""


class SaveAbandonedError(Exception):
    """A storage gave an asynchronous save up rather than write it wrong (direct/)."""


def dcp_state(job: SaveJob, target: SaveTarget) -> dict[str, Any]:
    """The state dict DCP writes for `job`: with this rank's generators in it."""
    return {**job.state, RANK_STATE_KEY: {str(target.rank): json.dumps(job.rank_state)}}


def publish(
    job: SaveJob, target: SaveTarget, files: dict[str, FileDigest], started: float
) -> Path | None:
    """Make the written checkpoint of `job` complete and the newest (rank 0; None elsewhere)."""
    if target.rank != 0:
        return None
    folder = target.store.partial(job.position.step)
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


def write_checkpoint(job: SaveJob, target: SaveTarget, storage: Storage) -> Path | None:
    """Save `job` from every rank now (a collective); return the published folder on rank 0."""
    started = time.perf_counter()
    folder = target.store.partial(job.position.step)
    files = storage.write(dcp_state(job, target), folder)
    return publish(job, target, files, started)


def _prepare_writer_thread(device: torch.device) -> None:
    """The background writer's thread: on this rank's GPU (a CUDA call there would otherwise
    create a context on GPU 0), and behind training in the CPU scheduler's queue."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Not Linux, or not allowed: the thread writes at normal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)


class BackgroundWriter:
    """Writes a run's checkpoints, one at a time: now (`write_now`), or in a background
    thread after the storage staged the state at the step boundary (`submit`)."""

    def __init__(self, target: SaveTarget, storage: Storage) -> None:
        self.target = target
        self.storage = storage
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="checkpoint",
            initializer=_prepare_writer_thread,
            initargs=(target.device,),
        )
        self._pending: Future[Path | None] | None = None

    def submit(self, job: SaveJob, *, later: frozenset[int] = frozenset()) -> None:
        """Stage the state now, write it in the background. Tensors whose data is at an
        address in `later` may be copied in the background: call `before_step` before
        anything changes them."""
        self.wait()
        started = time.perf_counter()
        folder = self.target.store.partial(job.position.step)
        finish = self.storage.start(dcp_state(job, self.target), folder, later=later)
        self._pending = self._executor.submit(self._finish, job, finish, started)

    def write_now(self, job: SaveJob) -> None:
        """Save `job` from this thread, once the save in flight (if any) is published."""
        self.wait()
        write_checkpoint(job, self.target, self.storage)

    def _finish(
        self, job: SaveJob, finish: Callable[[], dict[str, FileDigest]], started: float
    ) -> Path | None:
        try:
            files = finish()
        except SaveAbandonedError as reason:
            self._abandon(job, str(reason))
            return None
        return publish(job, self.target, files, started)

    def _abandon(self, job: SaveJob, reason: str) -> None:
        """Every rank gave the save up; the previous checkpoint stays."""
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
        self.storage.before_step()

    @property
    def waited_for_copy_s(self) -> float:
        """Seconds optimizer steps waited for a background copy, over the run."""
        return self.storage.waited_for_copy_s

    @property
    def in_flight(self) -> bool:
        """True while a save is being written."""
        return self._pending is not None and not self._pending.done()

    def wait(self) -> None:
        """Block until the save in flight (if any) is published; re-raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()
