"""Write one checkpoint from all ranks, then publish it atomically; optionally in the background.

Order, so that a crash at any moment leaves the previous checkpoint loadable:
1. every rank writes ranks/rank-N.json and its DCP shard into step-N.partial/;
2. dcp.save returns on every rank only after rank 0 wrote DCP's .metadata, i.e. after
   all shards are on disk;
3. every rank checksums the files it wrote, rank 0 gathers the sums into checkpoint.json,
   renames the folder to step-N and points LATEST at it, then applies retention.
"""

from __future__ import annotations

import copy
import itertools
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from scaletrain import __version__
from scaletrain.checkpoint.layout import CheckpointStore, files_of_rank, rank_file
from scaletrain.checkpoint.manifest import FileDigest, Manifest, Position, digest
from scaletrain.checkpoint.safe_load import METADATA_NAME
from scaletrain.checkpoint.state import write_rank_state


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
    """A gloo group of all ranks, used only by checkpoint writes."""
    keep: int


def stage(state: Any, into: Any = None) -> Any:
    """A private CPU copy of a state dict, so that training can go on changing the original.

    Tensors are copied into the buffers of `into` (the previous copy, already written) when
    their shapes match: no new memory to fault in at every save. New buffers are pinned
    when the tensor is on a GPU, for a fast device-to-host copy.
    """
    if type(state) is torch.Tensor:  # DTensor and other subclasses: copied by their own rules
        same = isinstance(into, torch.Tensor) and (into.shape, into.dtype) == (
            state.shape,
            state.dtype,
        )
        buffer = into if same else torch.empty_like(state, device="cpu", pin_memory=state.is_cuda)
        return buffer.copy_(state.detach())
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        earlier = into if isinstance(into, dict) else {}
        return {key: stage(value, earlier.get(key)) for key, value in state.items()}
    if isinstance(state, list | tuple):
        same_length = isinstance(into, list | tuple) and len(into) == len(state)
        return type(state)(
            stage(value, old)
            for value, old in itertools.zip_longest(state, into if same_length else ())
        )
    return copy.deepcopy(state)


def _gather(digests: dict[str, FileDigest], target: SaveTarget) -> dict[str, FileDigest]:
    if target.world_size == 1:
        return digests
    gathered: list[Any] = [None] * target.world_size if target.rank == 0 else []
    plain = {name: asdict(value) for name, value in digests.items()}
    dist.gather_object(plain, gathered if target.rank == 0 else None, dst=0, group=target.group)
    merged: dict[str, FileDigest] = {}
    for part in gathered:
        merged |= {name: FileDigest(**value) for name, value in part.items()}
    return merged


def write_checkpoint(job: SaveJob, target: SaveTarget) -> Path | None:
    """Save `job` from every rank (a collective); return the published folder on rank 0."""
    started = time.perf_counter()
    folder = target.store.partial(job.position.step)
    folder.mkdir(parents=True, exist_ok=True)
    write_rank_state(folder, target.rank, job.rank_state)
    metadata = dcp_save(
        job.state,
        storage_writer=FileSystemWriter(folder),
        process_group=target.group,
    )
    names = {info.relative_path for info in (metadata.storage_data or {}).values()}
    names |= {METADATA_NAME, *(rank_file(r) for r in range(target.world_size))}
    mine = files_of_rank(names, target.rank, target.world_size)
    files = _gather({name: digest(folder / name) for name in mine}, target)
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


class BackgroundWriter:
    """Writes checkpoints in a background thread, one at a time (asynchronous saving)."""

    def __init__(self, target: SaveTarget) -> None:
        self.target = target
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future[Path | None] | None = None
        self._staged: Any = None

    def submit(self, job: SaveJob) -> None:
        """Copy the state to CPU memory now (the only stall), write it in the background."""
        self.wait()  # also frees the previous copy's buffers for reuse
        self._staged = stage(job.state, into=self._staged)
        self._pending = self._executor.submit(
            write_checkpoint, replace(job, state=self._staged), self.target
        )

    def wait(self) -> None:
        """Block until the save in flight (if any) is published; re-raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()
