"""Detect which launcher started this process and read its layout.

Order matters: torchrun's variables win because `srun torchrun` also leaves SLURM_* set;
MPI comes before Slurm because `mpirun` inside a job inherits the batch step's SLURM_PROCID.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from scaletrain.runtime.launchers.mpi import MpiLauncher
from scaletrain.runtime.launchers.slurm import SlurmLauncher
from scaletrain.runtime.launchers.slurm_step import (
    ProcessFacts,
    check_not_batch_step,
    is_interactive_shell,
)
from scaletrain.runtime.launchers.torchrun import TorchrunLauncher
from scaletrain.runtime.layout import DEFAULT_MASTER_PORT, ProcessLayout


class Launcher(Protocol):
    name: str

    @staticmethod
    def detect(environ: Mapping[str, str], process: ProcessFacts) -> bool: ...

    @staticmethod
    def read(environ: Mapping[str, str], process: ProcessFacts) -> ProcessLayout: ...


LAUNCHERS: tuple[type[Launcher], ...] = (TorchrunLauncher, MpiLauncher, SlurmLauncher)

SINGLE_PROCESS = ProcessLayout(
    launcher="single",
    rank=0,
    local_rank=0,
    world_size=1,
    local_world_size=1,
    node_rank=0,
    num_nodes=1,
    master_addr="127.0.0.1",
    master_port=DEFAULT_MASTER_PORT,
)


def detect_layout(environ: Mapping[str, str], process: ProcessFacts | None = None) -> ProcessLayout:
    """The layout of this process according to the first launcher whose variables are set.
    `process`: its pid and whether it reads a terminal (default: this process's own)."""
    process = process or ProcessFacts.of_this_process()
    for launcher in LAUNCHERS:
        if launcher.detect(environ, process):
            return launcher.read(environ, process)
    if is_interactive_shell(environ, process):
        # `python train.py` typed into `srun --pty bash`: one process, whatever the step's
        # task count says (the other tasks' shells ended at once, with no terminal).
        return dataclasses.replace(SINGLE_PROCESS, launcher="interactive")
    check_not_batch_step(environ)
    return SINGLE_PROCESS
