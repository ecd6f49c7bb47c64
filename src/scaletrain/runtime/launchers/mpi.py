"""Processes started by an MPI launcher: Open MPI's mpirun, MPICH/Intel MPI's Hydra, or srun
with an MPI plugin (`srun --mpi=pmi2` sets PMI_RANK, `--mpi=pmix` PMIX_RANK).

Under srun, Slurm knows each task's node and local rank (cyclic and uneven distributions
included), so its variables are read. Under mpirun, MPI gives rank and local rank; rank 0
runs where mpirun runs, which inside a Slurm job is the job's first node. (Open MPI starts its
daemons with srun on the other nodes only, so their processes see a step node list without
the first node: the job's list is the one every rank agrees on.)
"""

from __future__ import annotations

from collections.abc import Mapping

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers.slurm_step import (
    WORLD_SIZE_VARIABLES,
    ProcessFacts,
    is_srun_task,
    master_addr,
    master_port,
    nodelist,
    read_step,
)
from scaletrain.runtime.layout import (
    ProcessLayout,
    VariableNames,
    check_layout,
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


def _started_by_srun(
    environ: Mapping[str, str], process: ProcessFacts, rank: int, world_size: int
) -> bool:
    """srun's MPI plugin started this process: Slurm's own numbers describe it. (Processes
    of mpirun inside a job inherit the batch step's or the daemon's SLURM_PROCID instead.)"""
    return (
        is_srun_task(environ, process)
        and read_optional_int(environ, "SLURM_PROCID") == rank
        and read_optional_int(environ, *WORLD_SIZE_VARIABLES) == world_size
    )


class MpiLauncher:
    """Reads OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE (Hydra, srun --mpi=pmi2) or PMIX_RANK."""

    name = "mpi"

    @staticmethod
    def detect(environ: Mapping[str, str], process: ProcessFacts) -> bool:
        return any(name in environ for name in RANK_VARIABLES)

    @staticmethod
    def read(environ: Mapping[str, str], process: ProcessFacts) -> ProcessLayout:
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
        if _started_by_srun(environ, process, rank, world_size):
            return read_step(environ, MpiLauncher.name)
        local_rank = read_optional_int(environ, *LOCAL_RANK_VARIABLES)
        local_world_size = read_optional_int(environ, *LOCAL_SIZE_VARIABLES)
        if local_rank is None or local_world_size is None:
            raise LaunchEnvironmentError(
                f"This MPI does not say which process runs where "
                f"(none of {', '.join(LOCAL_RANK_VARIABLES)} is set with "
                f"{' or '.join(LOCAL_SIZE_VARIABLES)}).",
                "use Open MPI's mpirun, MPICH's mpiexec (Hydra) or srun --mpi=pmix, which set "
                "the local rank.",
            )
        node_rank, num_nodes = _node_of(environ, rank, world_size, local_world_size)
        # MASTER_ADDR if set, else the job's first node (mpirun's, where rank 0 runs).
        address = master_addr(environ, of_job=True)
        if not address and num_nodes == 1:
            address = "127.0.0.1"
        layout = ProcessLayout(
            launcher=MpiLauncher.name,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=node_rank,
            num_nodes=num_nodes,
            master_addr=address,
            master_port=master_port(environ),
        )
        return check_layout(layout, names)


def _node_of(
    environ: Mapping[str, str], rank: int, world_size: int, local_world_size: int
) -> tuple[int, int]:
    """(node rank, nodes) of an mpirun process: this host's place in the Slurm job's node list
    when there is one (any distribution), else blocks of `local_world_size` ranks per node
    (mpirun's default placement)."""
    hosts, this_host = nodelist(environ, of_job=True), environ.get("SLURMD_NODENAME", "")
    if this_host in hosts and world_size > local_world_size:
        return hosts.index(this_host), len(hosts)
    return rank // local_world_size, -(-world_size // local_world_size)
