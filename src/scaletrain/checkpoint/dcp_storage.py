"""The default storage: checkpoint files through DCP's public API alone.

A save is `torch.distributed.checkpoint.save`, or `async_save` with DCP's own stager
(torch_compat.py). What scaletrain adds: after the write, each rank takes the size and CRC-32
of the files it wrote (still in its page cache) and rank 0 gathers them for the manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from scaletrain.checkpoint.layout import files_of_rank
from scaletrain.checkpoint.manifest import FileDigest, digest
from scaletrain.checkpoint.process_switches import (
    automatic_gc,
    without_automatic_gc,
    without_dcp_collectives,
)
from scaletrain.checkpoint.torch_compat import AsyncSaver
from scaletrain.checkpoint.writer import SaveTarget


class DcpStorage:
    """Saves with DCP's `save` and `async_save`."""

    copies_in_background = False
    waited_for_copy_s = 0.0

    def __init__(self, target: SaveTarget, *, pin: bool) -> None:
        self._rank = target.rank
        self._world_size = target.world_size
        self._group = target.group
        self._async = AsyncSaver(pin=pin)

    def write(self, state: dict[str, Any], folder: Path) -> dict[str, FileDigest]:
        with without_automatic_gc():
            dcp_save(
                state,
                storage_writer=FileSystemWriter(folder),
                process_group=self._group,
                no_dist=without_dcp_collectives(self._world_size),
            )
        return self._digests(folder)

    def start(
        self, state: dict[str, Any], folder: Path, *, later: frozenset[int]
    ) -> Callable[[], dict[str, FileDigest]]:
        # The collector stays off until the write ends: DCP plans in its own thread.
        automatic_gc.hold_off()
        try:
            saving = self._async.start(
                state, folder, group=self._group, alone=without_dcp_collectives(self._world_size)
            )
        except BaseException:
            automatic_gc.release()
            raise

        def finish() -> dict[str, FileDigest]:
            try:
                saving.result()
            finally:
                automatic_gc.release()
            return self._digests(folder)

        return finish

    def before_step(self) -> None:
        """Nothing to wait for: DCP's stager copied the whole state in `start`."""

    def _digests(self, folder: Path) -> dict[str, FileDigest]:
        """The digests of the files this rank wrote into `folder` (rank 0: `.metadata` too),
        gathered on rank 0."""
        names = {path.name for path in folder.iterdir() if path.is_file()}
        mine = files_of_rank(names, self._rank, self._world_size)
        return gather_digests(
            {name: digest(folder / name) for name in mine},
            rank=self._rank,
            world_size=self._world_size,
            group=self._group,
        )


def gather_digests(
    digests: dict[str, FileDigest],
    *,
    rank: int,
    world_size: int,
    group: dist.ProcessGroup | None,
) -> dict[str, FileDigest]:
    """Every rank's file digests, on rank 0 (a collective); `digests` elsewhere."""
    if world_size == 1:
        return digests
    gathered: list[Any] = [None] * world_size if rank == 0 else []
    plain = {name: asdict(value) for name, value in digests.items()}
    dist.gather_object(plain, gathered if rank == 0 else None, dst=0, group=group)
    if rank != 0:
        return digests
    merged: dict[str, FileDigest] = {}
    for part in gathered:
        merged |= {name: FileDigest(**value) for name, value in part.items()}
    return merged
