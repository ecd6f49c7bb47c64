"""What differs, in DCP's public API, between the torch versions the checkpoints support
(2.7 to 2.15): found by feature detection, here and nowhere else.

- torch 2.9 gave `async_save` an `async_stager` (DCP's `DefaultStager`: a copy of the state
  in CPU memory, reused from save to save, page-locked where CUDA is) and a `no_dist`.
  Before, the storage writer stages (`FileSystemWriter` is DCP's `BlockingAsyncStager`) and
  keeps its copy only page-locked, so only where CUDA is; and a world of one runs DCP's
  collectives on its group of one. A state of ShardedTensors (DeepSpeed's partitions) is
  staged so on every version: `DefaultStager` cannot copy them.
"""

from __future__ import annotations

import inspect
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import async_save

_ASYNC_SAVE_ARGUMENTS = inspect.signature(async_save).parameters
HAS_ASYNC_STAGER = "async_stager" in _ASYNC_SAVE_ARGUMENTS
"""Whether `async_save` takes DCP's own stager (torch 2.9 and later)."""
HAS_ASYNC_NO_DIST = "no_dist" in _ASYNC_SAVE_ARGUMENTS
"""Whether `async_save` runs without collectives in a world of one (torch 2.9 and later)."""


class AsyncSaver:
    """DCP's `async_save` with DCP's own staging, kept for a run: the staged copy is reused
    from save to save where this torch can, page-locked when `pin` and CUDA is there."""

    def __init__(self, *, pin: bool) -> None:
        self._pin = pin and torch.cuda.is_available()
        self._stager: Any = None
        self._staging_writer: FileSystemWriter | None = None
        if HAS_ASYNC_STAGER:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=self._pin,
                    use_shared_memory=False,  # the write runs in a thread of this process
                    use_async_staging=False,  # copied at the step boundary, before it returns
                    use_non_blocking_copy=self._pin,
                )
            )

    def start(
        self, state: dict[str, Any], folder: Path, *, group: dist.ProcessGroup | None, alone: bool
    ) -> Future[Any]:
        """Stage `state` now, write it into `folder` in DCP's thread; `alone`: a world of one."""
        options: dict[str, Any] = {"no_dist": alone} if HAS_ASYNC_NO_DIST else {}
        # DefaultStager cannot copy a ShardedTensor (DeepSpeed's partitions): the writer's
        # own staging can.
        if self._stager is not None and not _holds_sharded_tensors(state):
            writer = _staged_writer(folder, cache=False)
            options["async_stager"] = self._stager
        else:
            # The writer stages, and keeps its copy only page-locked: the same writer for
            # every save of the run, pointed at each save's folder by DCP.
            if self._staging_writer is None:
                self._staging_writer = _staged_writer(folder, cache=self._pin)
            writer = self._staging_writer
        saving = async_save(
            state, checkpoint_id=folder, storage_writer=writer, process_group=group, **options
        )
        assert isinstance(saving, Future)  # staged before it returned: no staging future
        return saving


def _staged_writer(folder: Path, *, cache: bool) -> FileSystemWriter:
    # per_thread_copy_ahead=0: the state is in CPU memory already, and a writer that copies
    # ahead opens a stream on the thread's current GPU (GPU 0 of every rank) for it.
    return FileSystemWriter(folder, per_thread_copy_ahead=0, cache_staged_state_dict=cache)


def _holds_sharded_tensors(state: Any) -> bool:
    if isinstance(state, torch.Tensor):
        return hasattr(state, "local_shards")  # ShardedTensor, without its private import
    if isinstance(state, dict):
        return any(_holds_sharded_tensors(value) for value in state.values())
    if isinstance(state, list | tuple):
        return any(_holds_sharded_tensors(value) for value in state)
    return False
