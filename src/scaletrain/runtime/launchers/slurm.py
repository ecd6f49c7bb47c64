"""Processes started by `srun`, one task per GPU, without torchrun: the step's own numbers
(slurm_step.py) are the layout."""

from __future__ import annotations

from collections.abc import Mapping

from scaletrain.runtime.launchers.slurm_step import ProcessFacts, is_srun_task, read_step
from scaletrain.runtime.layout import ProcessLayout


class SlurmLauncher:
    """Reads SLURM_PROCID/SLURM_LOCALID/SLURM_NODEID/SLURM_*TASKS* of an `srun` step."""

    name = "slurm"

    @staticmethod
    def detect(environ: Mapping[str, str], process: ProcessFacts) -> bool:
        return is_srun_task(environ, process)

    @staticmethod
    def read(environ: Mapping[str, str], process: ProcessFacts) -> ProcessLayout:
        return read_step(environ, SlurmLauncher.name)
