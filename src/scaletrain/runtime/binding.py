"""Each process on the cores nearest its GPU, where its launcher did not bind it.

torchrun (and accelerate, which runs torchrun) start every process of a node in one Slurm task
that holds all the node's cores, so without binding each process may run on any core, far
from its GPU (LUMI: 7 cores per GCD, in an order that does not follow the GCD numbering).
torch 2.9+ binds them itself (--numa-binding, which generated jobs pass); with an older torch,
or accelerate, the job exports the site's masks and `st.init()` binds each process here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Set

from scaletrain.core import variables
from scaletrain.runtime.layout import ProcessLayout

logger = logging.getLogger("scaletrain")

# Launchers that start all processes of a node from one task with all its cores.
_SHARED_TASK_LAUNCHERS = ("torchrun", "env")


def cores_for(local_rank: int, masks: str, allowed: Set[int]) -> set[int] | None:
    """The cores of this local rank's mask, if binding to them narrows `allowed`; else None
    (no mask for it, none of its cores allowed, or already bound as narrowly)."""
    hex_masks = [mask for mask in masks.replace(" ", "").split(",") if mask]
    if local_rank >= len(hex_masks):
        return None
    mask = int(hex_masks[local_rank], 16)
    cores = {core for core in allowed if mask >> core & 1}
    return cores if cores and cores < allowed else None


def bind_to_gpu_cores(layout: ProcessLayout, environ: Mapping[str, str]) -> set[int] | None:
    """Bind this process to its GPU's cores from SCALETRAIN_CPU_MASKS; the cores, if bound."""
    masks = environ.get(variables.CPU_MASKS, "")
    if not masks or layout.launcher not in _SHARED_TASK_LAUNCHERS:
        return None
    cores = cores_for(layout.local_rank, masks, os.sched_getaffinity(0))
    if cores is not None:
        os.sched_setaffinity(0, cores)
        logger.info("bound local rank %d to cores %s (%s)", layout.local_rank, sorted(cores), masks)
    return cores
