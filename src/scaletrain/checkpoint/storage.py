"""How one rank's share of a checkpoint becomes files: the storage a run uses, chosen by
`Checkpointer(storage=...)`. Every checkpoint is read back by DCP's own `load` (resume.py).

- "dcp" (the default): DCP's public `save`, and `async_save` with DCP's own stager
  (dcp_storage.py).
- "direct": an opt-in storage of scaletrain's own (direct/), on private torch entry points:
  used only on the torch versions it was tested on, else "dcp" with one notice line.

Either way the files are DCP's format, so a run can change its storage between restarts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from scaletrain.checkpoint.dcp_storage import DcpStorage
from scaletrain.checkpoint.manifest import FileDigest
from scaletrain.checkpoint.writer import SaveTarget
from scaletrain.core.errors import ScaletrainError
from scaletrain.train.ranks import print0

StorageName = Literal["dcp", "direct"]
STORAGES: tuple[StorageName, ...] = ("dcp", "direct")


class Storage(Protocol):
    """Writes one rank's share of a checkpoint, in DCP's format."""

    copies_in_background: bool
    """Whether an asynchronous save copies what only optimizer steps change after `start`
    returns: the next optimizer step must call `before_step` first."""
    waited_for_copy_s: float
    """Seconds optimizer steps waited in `before_step`, over the run."""

    def write(self, state: dict[str, Any], folder: Path) -> dict[str, FileDigest]:
        """Write `state` into `folder` (a collective); every rank's file digests on rank 0,
        this rank's elsewhere."""
        ...

    def start(
        self, state: dict[str, Any], folder: Path, *, later: frozenset[int]
    ) -> Callable[[], dict[str, FileDigest]]:
        """Begin an asynchronous save of `state` at the step boundary; the function returned
        writes it, from the writer thread, and returns what `write` does (or raises
        writer.SaveAbandonedError). Tensors whose data is at an address in `later` may be copied
        after this returns (`copies_in_background`)."""
        ...

    def before_step(self) -> None:
        """Wait until the state an optimizer step is about to change is copied."""
        ...


def open_storage(name: str, target: SaveTarget, *, pin: bool, asynchronous: bool) -> Storage:
    """The storage named `name` for a run's saves."""
    if name not in STORAGES:
        raise ScaletrainError(
            f"Checkpointer(storage={name!r}) names no storage.",
            "use storage='dcp' (the default: DCP's public API) or 'direct' (opt-in).",
        )
    if name == "direct":
        unusable = direct_unusable_because(torch.__version__)
        if unusable is None:
            from scaletrain.checkpoint.direct.storage import DirectStorage

            return DirectStorage(target, pin=pin, asynchronous=asynchronous)
        print0(
            f"scaletrain: storage='direct' {unusable}; checkpoints go through DCP's public "
            "API instead (storage='dcp')",
            file=sys.stderr,
        )
    return DcpStorage(target, pin=pin)


def direct_unusable_because(torch_version: str) -> str | None:
    """Why the direct storage cannot be used with this torch; None when it can."""
    release = torch_version.split("+")[0]
    try:
        from scaletrain.checkpoint.direct.torch_private import TESTED_TORCH_VERSIONS
    except ImportError as error:  # a private entry point is gone from this torch
        return f"cannot run on torch {release} ({error})"
    if release not in TESTED_TORCH_VERSIONS:
        return f"was tested on torch {', '.join(TESTED_TORCH_VERSIONS)}, not on {release}"
    return None
