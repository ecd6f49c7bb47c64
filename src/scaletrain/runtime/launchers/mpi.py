"""Processes started by an MPI launcher: Open MPI's mpirun, MPICH/Intel MPI's Hydra, PMIx.

MPI says who is who but not where rank 0 listens, so the address comes from MASTER_ADDR,
from Slurm's node list when MPI runs inside a Slurm job, or is local on a single node.
"""

from __future__ import annotations

from collections.abc import Mapping

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import slurm
from scaletrain.runtime.layout import (
    ProcessLayout,
    VariableNames,
    check_layout,
    first_set,
    read_optional_int,
)

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "SLURM_LOCALID",
)
LOCAL_SIZE_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")


def _names(environ: Mapping[str, str]) -> VariableNames:
    """The variables this particular MPI actually set, for error messages."""

    def which(candidates: tuple[str, ...]) -> str:
        return next((name for name in candidates if name in environ), candidates[0])

    return VariableNames(
        rank=which(RANK_VARIABLES),
        world_size=which(SIZE_VARIABLES),
        local_rank=which(LOCAL_RANK_VARIABLES),
    )


class MpiLauncher:
    """Reads OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE (Hydra) or PMIX_RANK."""

    name = "mpi"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return any(name in environ for name in RANK_VARIABLES)

    @staticmethod
    def read(environ: Mapping[str, str]) -> ProcessLayout:
        names = _names(environ)
        rank = read_optional_int(environ, *RANK_VARIABLES)
        world_size = read_optional_int(environ, *SIZE_VARIABLES)
        if rank is None or world_size is None:
            raise LaunchEnvironmentError(
                f"{names.rank} is set but the world size is not "
                f"(looked for {', '.join(SIZE_VARIABLES)}).",
                "start the job with mpirun/srun so that the MPI size variable is set, "
                "or export WORLD_SIZE and use torchrun's variables instead.",
            )
        local_rank = read_optional_int(environ, *LOCAL_RANK_VARIABLES)
        local_world_size = read_optional_int(environ, *LOCAL_SIZE_VARIABLES) or (
            slurm.tasks_on_this_node(environ)
        )
        if local_rank is None or local_world_size is None:
            raise LaunchEnvironmentError(
                f"This MPI does not say which process runs where "
                f"(none of {', '.join(LOCAL_RANK_VARIABLES)} is set).",
                "use Open MPI's mpirun, MPICH's mpiexec (Hydra) or srun, which set the local rank.",
            )
        num_nodes = -(-world_size // local_world_size)
        master_addr = first_set(environ, "MASTER_ADDR") or slurm.master_addr(environ)
        if not master_addr and num_nodes == 1:
            master_addr = "127.0.0.1"
        layout = ProcessLayout(
            launcher=MpiLauncher.name,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            # MPI launchers place ranks in blocks per node by default.
            node_rank=rank // local_world_size,
            num_nodes=num_nodes,
            master_addr=master_addr,
            master_port=slurm.master_port(environ),
        )
        return check_layout(layout, names)
