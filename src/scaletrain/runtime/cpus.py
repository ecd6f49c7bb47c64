"""How many CPU cores one training process may use."""

from __future__ import annotations

import os
from collections.abc import Mapping

from scaletrain.runtime.layout import ProcessLayout, read_optional_int

# Launchers that start one task per rank, each with a CPU allocation of its own.
_PER_TASK_LAUNCHERS = ("slurm", "mpi")


def allowed_cpus() -> int:
    """Cores this process may run on (its affinity mask), not the cores of the machine."""
    return len(os.sched_getaffinity(0))


def cpus_per_process(layout: ProcessLayout, environ: Mapping[str, str], allowed: int) -> int:
    """This rank's share of cores: its own task's under srun/mpirun, else an equal share of
    the cores that all local ranks of torchrun inherit from the one launcher process."""
    if layout.launcher in _PER_TASK_LAUNCHERS:
        # Without CPU binding (TaskPlugin=task/none) every task sees the whole node, so
        # Slurm's allocation is the better bound.
        per_task = read_optional_int(environ, "SLURM_CPUS_PER_TASK")
        return max(1, min(allowed, per_task) if per_task else allowed)
    return max(1, allowed // layout.local_world_size)
