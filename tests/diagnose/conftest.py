"""Helpers for the diagnostics tests: ranks started as a job would start them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import PROCESS_TIMEOUT_S, REPO, clean_environ, free_port

# Started as files, as a launcher starts a script (python -m runs the same __main__.py).
PREFLIGHT = REPO / "src" / "scaletrain" / "diagnose" / "preflight" / "__main__.py"
BENCH = REPO / "src" / "scaletrain" / "diagnose" / "bench" / "__main__.py"


def start_ranks(
    world_size: int,
    args: Sequence[str] = (),
    *,
    master_addr: str = "127.0.0.1",
    prefix: Sequence[Sequence[str]] = (),
    extra: dict[str, str] | None = None,
    script: Path = PREFLIGHT,
    one_per_node: bool = False,
) -> list[subprocess.CompletedProcess[str]]:
    """Start one process per rank with torch's env:// variables set by hand, as
    `srun bash -c 'RANK=$SLURM_PROCID ... python ...'` does; `prefix[r]` wraps rank r's
    command (taskset, ip netns exec); `one_per_node` makes every rank a node of its own.
    Returns each rank's finished process."""
    port = str(free_port())
    processes = []
    for rank in range(world_size):
        environ = clean_environ(
            RANK=str(rank),
            LOCAL_RANK="0" if one_per_node else str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_WORLD_SIZE="1" if one_per_node else str(world_size),
            GROUP_RANK=str(rank) if one_per_node else "0",
            MASTER_ADDR=master_addr,
            MASTER_PORT=port,
            # The join waits 3 × this: a rank pinned to one busy core of this shared 2-core
            # machine can take over 30 s to import torch (an option on the command wins).
            SCALETRAIN_RENDEZVOUS_TIMEOUT="40",
            **(extra or {}),
        )
        wrapper = list(prefix[rank]) if prefix else []
        command = [*wrapper, sys.executable, str(script), *args]
        processes.append(
            subprocess.Popen(
                command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    finished = []
    for process in processes:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
        finished.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return finished


def shown(result: subprocess.CompletedProcess[str]) -> str:
    """What the user sees on the terminal: the report (stdout) and the notes (stderr)."""
    return result.stdout + result.stderr
