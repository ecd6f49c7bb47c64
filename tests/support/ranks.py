"""Ranks started by hand with torch's env:// variables, as `srun bash -c 'RANK=$SLURM_PROCID
... python ...'` starts one task per GPU: no launcher process between a test and its ranks."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import clean_environ, free_port


def start_ranks(
    command: Sequence[str],
    world_size: int,
    *,
    master_addr: str = "127.0.0.1",
    prefix: Sequence[Sequence[str]] = (),
    one_per_node: bool = False,
    extra: Mapping[str, str] | None = None,
    logs: Path | None = None,
) -> list[subprocess.Popen[str]]:
    """Start `command` once per rank, on a free port, and return the processes.

    `prefix[r]` wraps rank r's command (taskset, ip netns exec); `one_per_node` makes every
    rank a node of its own; `extra` adds variables. Each rank writes its stdout and stderr to
    `logs`/rank-N.out when given, else to pipes the caller reads."""
    port = str(free_port())
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    ranks = []
    for rank in range(world_size):
        environ = clean_environ(
            RANK=str(rank),
            LOCAL_RANK="0" if one_per_node else str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_WORLD_SIZE="1" if one_per_node else str(world_size),
            GROUP_RANK=str(rank) if one_per_node else "0",
            MASTER_ADDR=master_addr,
            MASTER_PORT=port,
            **(extra or {}),
        )
        wrapped = [*(prefix[rank] if prefix else ()), *command]
        if logs is None:
            ranks.append(
                subprocess.Popen(
                    wrapped, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
            continue
        with (logs / f"rank-{rank}.out").open("w") as log:
            ranks.append(subprocess.Popen(wrapped, env=environ, stdout=log, stderr=log, text=True))
    return ranks
