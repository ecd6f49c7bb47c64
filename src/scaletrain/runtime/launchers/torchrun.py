"""Processes started by torchrun, or by any launcher that sets torch's env:// variables.

accelerate, the deepspeed launcher and hand-written `RANK=... python train.py` lines all set
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR, so they are read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers.slurm_step import (
    WORLD_SIZE_VARIABLES,
    ProcessFacts,
    is_srun_task,
    tasks_on_this_node,
)
from scaletrain.runtime.layout import (
    DEFAULT_MASTER_PORT,
    ProcessLayout,
    VariableNames,
    check_layout,
    check_world_size,
    first_set,
    read_int,
    read_optional_int,
)

NAMES = VariableNames(rank="RANK", world_size="WORLD_SIZE", local_rank="LOCAL_RANK")


def _mirrors_srun(environ: Mapping[str, str], process: ProcessFacts) -> bool:
    """RANK and WORLD_SIZE only repeat an srun task's own numbers (generated per-GPU jobs
    export them for scripts that read env://): the task is Slurm's, with its own cores."""
    return (
        is_srun_task(environ, process)
        and environ.get("RANK") == environ.get("SLURM_PROCID")
        and environ.get("WORLD_SIZE") == first_set(environ, *WORLD_SIZE_VARIABLES)
    )


class TorchrunLauncher:
    """Reads RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/GROUP_RANK/MASTER_ADDR/MASTER_PORT."""

    name = "torchrun"

    @staticmethod
    def detect(environ: Mapping[str, str], process: ProcessFacts) -> bool:
        if "TORCHELASTIC_RUN_ID" in environ:
            return True
        return "RANK" in environ and "WORLD_SIZE" in environ and not _mirrors_srun(environ, process)

    @staticmethod
    def read(environ: Mapping[str, str], process: ProcessFacts) -> ProcessLayout:
        for required in ("RANK", "WORLD_SIZE"):
            if required not in environ:
                raise LaunchEnvironmentError(
                    f"{required} is not set although torchrun variables are present.",
                    "launch with torchrun (it sets RANK and WORLD_SIZE) or set both by hand.",
                )
        rank = read_int(environ, "RANK")
        world_size = check_world_size(read_int(environ, "WORLD_SIZE"), NAMES.world_size)
        local_rank = read_optional_int(environ, "LOCAL_RANK", "SLURM_LOCALID")
        if local_rank is None:
            if world_size > 1:
                raise LaunchEnvironmentError(
                    "LOCAL_RANK is not set, so the process cannot choose its GPU.",
                    "export LOCAL_RANK (torchrun sets it; under srun: LOCAL_RANK=$SLURM_LOCALID).",
                )
            local_rank = 0
        # Hand-set variables often lack LOCAL_WORLD_SIZE; Slurm can still say how many tasks
        # share this node. Without either, assume a single node.
        local_world_size = (
            read_optional_int(environ, "LOCAL_WORLD_SIZE")
            or tasks_on_this_node(environ, world_size)
            or world_size
        )
        num_nodes = read_optional_int(environ, "GROUP_WORLD_SIZE") or -(
            -world_size // local_world_size
        )
        node_rank = read_optional_int(environ, "GROUP_RANK", "NODE_RANK")
        # An explicit MASTER_PORT=0 reaches check_layout (an error, as under srun).
        port = read_optional_int(environ, "MASTER_PORT")
        layout = ProcessLayout(
            launcher=TorchrunLauncher.name if "TORCHELASTIC_RUN_ID" in environ else "env",
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=node_rank if node_rank is not None else rank // local_world_size,
            num_nodes=num_nodes,
            master_addr=environ.get("MASTER_ADDR", "" if world_size > 1 else "127.0.0.1"),
            master_port=port if port is not None else DEFAULT_MASTER_PORT,
        )
        return check_layout(layout, NAMES)
