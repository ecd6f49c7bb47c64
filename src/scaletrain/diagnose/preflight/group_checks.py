"""Checks made after the ranks joined the process group: a shared run folder and a small
all_reduce that must give the right sum on every rank."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from scaletrain.diagnose.preflight.results import CheckResult, fail, ok, skip

if TYPE_CHECKING:
    import torch

# Values per rank in the all_reduce test: enough to cross a few packets, cheap everywhere.
_ALL_REDUCE_ELEMENTS = 1024
SHARED_FILE = ".preflight-shared"


def check_shared_folder(root: Path | None, token: str | None) -> CheckResult:
    """The file rank 0 wrote into the run folder must be visible, unchanged, on this node."""
    name = "shared-folder"
    if root is None or token is None:
        return skip(name, "rank 0 could not write a probe file (see run-folder)")
    probe = root / SHARED_FILE
    try:
        found = probe.read_text(encoding="utf-8")
    except OSError:
        found = None
    if found != token:
        return fail(
            name,
            f"{socket.gethostname()} does not see the file rank 0 wrote in {root}",
            "put the runs folder on a file system all nodes share (project or scratch), "
            "not /tmp or a node-local disk",
        )
    return ok(name, f"sees rank 0's file in {root}")


def check_all_reduce(device: torch.device, rank: int, world_size: int) -> CheckResult:
    """Sum (rank + 1) over all ranks; every element must equal n (n + 1) / 2."""
    import torch
    import torch.distributed as dist

    name = "all-reduce"
    expected = world_size * (world_size + 1) / 2
    values = torch.full((_ALL_REDUCE_ELEMENTS,), float(rank + 1), device=device)
    started = time.perf_counter()
    try:
        dist.all_reduce(values)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as error:  # any backend error is the finding itself
        return fail(
            name,
            f"all_reduce raised {type(error).__name__}: {str(error)[:300]}",
            "see the communication and rendezvous checks; rerun with NCCL_DEBUG=INFO",
        )
    elapsed_ms = (time.perf_counter() - started) * 1000
    wrong = int((values != expected).sum())
    if wrong:
        return fail(
            name,
            f"{wrong} of {values.numel()} sums wrong (first {values[0].item():g}, "
            f"expected {expected:g})",
            f"exclude this node (sbatch --exclude={socket.gethostname()}) and report it: "
            "a GPU, driver or link corrupts data",
        )
    return ok(name, f"sum over {world_size} ranks correct ({expected:g}) in {elapsed_ms:.1f} ms")
