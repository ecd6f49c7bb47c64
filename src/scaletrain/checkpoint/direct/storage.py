"""The direct storage: each rank's file built in memory and written around the page cache,
with its checksum taken on the way, and a plan reused while the state's layout stays.

An asynchronous save stages at the step boundary what the next forward and backward may
change (stager.py) and leaves the rest, the parameters and optimizer state only
`optimizer.step()` changes, to the early copy (file_image.py): the next optimizer step waits
for that copy in `before_step`, not for the write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from scaletrain.checkpoint.direct.file_image import FileImage, PlanChangedError
from scaletrain.checkpoint.direct.plan_cache import PlanCache
from scaletrain.checkpoint.direct.stager import Deferred, stage
from scaletrain.checkpoint.direct.writer import (
    DirectWriter,
    state_bytes,
    tensor_bytes,
    writer_options,
)
from scaletrain.checkpoint.manifest import FileDigest
from scaletrain.checkpoint.process_switches import (
    without_automatic_gc,
    without_record_checksums,
)
from scaletrain.checkpoint.state import local_part
from scaletrain.checkpoint.writer import SaveAbandonedError, SaveTarget

# A synchronous save of a state of many small tensors is built as a file image too, in
# memory taken for the save: DCP's writer runs torch.save for every tensor. A large state
# is not, since fresh memory costs its page faults per MB.
SYNC_IMAGE_MAX_BYTES = 512 * 2**20
SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES = 2**20


def many_small_tensors(state: Any) -> bool:
    """Whether a synchronous save of `state` is built as a file image (SYNC_IMAGE_MAX_*)."""
    sizes = tensor_bytes(state)
    return sum(sizes) <= min(SYNC_IMAGE_MAX_BYTES, len(sizes) * SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES)


class DirectStorage:
    """Saves with a file image, direct writes and a plan cache."""

    copies_in_background = True

    def __init__(self, target: SaveTarget, *, pin: bool, asynchronous: bool) -> None:
        self._target = target
        self._pin = pin
        self._asynchronous = asynchronous
        self._staged: Any = None
        self._image = FileImage(pin=pin)
        # A synchronous save's, given back after each save. Never page-locked: registering
        # memory with the GPU driver takes time in proportion to its size, for one copy.
        self._image_once = FileImage(pin=False)
        # Every save of the run plans with it, synchronous or not.
        self._plans = PlanCache(rank=target.rank, world_size=target.world_size, group=target.group)
        self._copied: threading.Event | None = None
        self.waited_for_copy_s = 0.0

    def write(self, state: dict[str, Any], folder: Path) -> dict[str, FileDigest]:
        """A synchronous save: built in the asynchronous saves' image when a run keeps one,
        in memory given back after for a state of many small tensors, else through DCP's
        own writer (with checksums while writing, around the page cache)."""
        if self._asynchronous:
            return self._write(state, folder, self._image)
        if many_small_tensors(state):
            try:
                return self._write(state, folder, self._image_once)
            finally:
                self._image_once.release()
        return self._write(state, folder, None)

    def start(
        self, state: dict[str, Any], folder: Path, *, later: frozenset[int]
    ) -> Callable[[], dict[str, FileDigest]]:
        deferred: list[Deferred] = []
        self._staged = stage(
            state, into=self._staged, pin=self._pin, later=later, deferred=deferred
        )
        staged = self._staged
        copied = self._copied = threading.Event() if deferred else None
        done = copied.set if copied is not None else lambda: None
        # Their copy starts now, to the places of the previous save, while the writer has DCP
        # plan the save: from this thread, so that it copies at training's priority (the
        # next optimizer step waits for it) rather than at the writer's.
        self._image.start_early_copy(
            [local_part(tensor).detach() for _, _, tensor in deferred], copied=done
        )

        def finish() -> dict[str, FileDigest]:
            # Built from training's own tensors where the copy was deferred; their places
            # are emptied again after, so that the next save never stages into them.
            for container, key, tensor in deferred:
                container[key] = tensor
            try:
                return self._write(staged, folder, self._image, copied=done)
            except CheckpointException as error:
                reasons = [failure for failure, _ in error.failures.values()]
                if reasons and all(isinstance(reason, PlanChangedError) for reason in reasons):
                    raise SaveAbandonedError(str(reasons[0])) from error
                raise
            finally:
                self._image.end_early_copy()  # also when the save failed before the build
                done()  # also when the save failed before the copy: the error comes with wait()
                for container, key, _ in deferred:
                    container[key] = None

        return finish

    def before_step(self) -> None:
        copied, self._copied = self._copied, None
        if copied is None or copied.is_set():
            return
        started = time.perf_counter()
        copied.wait()
        self.waited_for_copy_s += time.perf_counter() - started

    def _write(
        self,
        state: dict[str, Any],
        folder: Path,
        image: FileImage | None,
        copied: Callable[[], None] = lambda: None,
    ) -> dict[str, FileDigest]:
        return write_share(
            state, folder, self._plans, cores=self._target.cores, image=image, copied=copied
        )


def write_share(
    state: dict[str, Any],
    folder: Path,
    plans: PlanCache,
    *,
    cores: int,
    image: FileImage | None = None,
    copied: Callable[[], None] = lambda: None,
) -> dict[str, FileDigest]:
    """Write this rank's share of `state` into `folder` with the run's `plans` (a collective).
    With an `image`, this rank's file is built in it, by this one thread, and `copied` is
    called once the state's tensors are copied there."""
    options = writer_options(state_bytes(state), cores, staged=image is not None)
    writer = DirectWriter(folder, options, image=image, copied=copied)
    with without_record_checksums(), without_automatic_gc():
        return plans.save(state, writer)
