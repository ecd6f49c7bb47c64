"""Where a process sits in a distributed job: its launcher's layout, its cores, and the
DistEnv that `st.init()` decides from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.core.run_folder import RunFolder

if TYPE_CHECKING:
    import torch

# torchrun's own default; used only where no launcher says otherwise.
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True, kw_only=True, slots=True)
class VariableNames:
    """The environment variables a launcher uses, so that errors can name them."""

    rank: str
    world_size: str
    local_rank: str
    master_addr: str = "MASTER_ADDR"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessLayout:
    """Rank and group sizes of one process, independent of any device or torch."""

    launcher: str
    """torchrun, env (torch's variables set by another tool), slurm, mpi or single."""
    rank: int
    """Global rank, 0 .. world_size-1."""
    local_rank: int
    """Rank among the processes on this node; picks the GPU."""
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int


def read_int(environ: Mapping[str, str], name: str) -> int:
    """Read an integer variable, with an error that names it when it is not one."""
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise LaunchEnvironmentError(
            f"{name}={value!r} is not an integer.",
            f"set {name} to a whole number or let the launcher set it.",
        ) from None


def read_optional_int(environ: Mapping[str, str], *names: str) -> int | None:
    """The first of `names` that is set, as an integer; None when none is set."""
    for name in names:
        if environ.get(name, "") != "":
            return read_int(environ, name)
    return None


def first_set(environ: Mapping[str, str], *names: str) -> str | None:
    """The value of the first variable in `names` that is set and not empty."""
    for name in names:
        value = environ.get(name, "")
        if value != "":
            return value
    return None


def check_world_size(world_size: int, name: str) -> int:
    """The world size, if it is at least 1 (the layout's arithmetic divides by it)."""
    if world_size < 1:
        raise LaunchEnvironmentError(
            f"{name}={world_size} must be at least 1.",
            f"check how {name} is set; the launcher normally sets it.",
        )
    return world_size


def check_layout(layout: ProcessLayout, names: VariableNames) -> ProcessLayout:
    """Reject layouts that would hang or crash later, naming the variable at fault."""
    check_world_size(layout.world_size, names.world_size)
    if not 0 <= layout.rank < layout.world_size:
        raise LaunchEnvironmentError(
            f"{names.rank}={layout.rank} is outside 0..{layout.world_size - 1} "
            f"({names.world_size}={layout.world_size}).",
            f"ranks count from 0 to {names.world_size}-1; do not set {names.rank} by hand "
            "or make both variables come from the same launcher.",
        )
    if not 0 <= layout.local_rank < layout.local_world_size:
        raise LaunchEnvironmentError(
            f"{names.local_rank}={layout.local_rank} is outside 0..{layout.local_world_size - 1} "
            f"({layout.local_world_size} processes on this node).",
            "start as many processes per node as the job asked for "
            "(torchrun --nproc-per-node, or srun --ntasks-per-node).",
        )
    if layout.world_size > 1 and not layout.master_addr:
        raise LaunchEnvironmentError(
            f"{names.master_addr} is not set, but {layout.world_size} processes must find rank 0.",
            f"export {names.master_addr}=<first node of the job>, e.g. "
            '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1), '
            "or launch with torchrun.",
        )
    if not 0 < layout.master_port < 65536:
        raise LaunchEnvironmentError(
            f"MASTER_PORT={layout.master_port} is not a valid TCP port.",
            "choose a port between 1024 and 65535, e.g. 29500.",
        )
    return layout


@dataclass(frozen=True, kw_only=True, slots=True)
class DistEnv(ProcessLayout):
    """A process's layout (rank, group sizes, rendezvous address) plus its device, backend
    and CPU share, as decided by scaletrain.init()."""

    device: torch.device
    backend: str
    """torch.distributed backend: nccl (RCCL on ROCm) for GPUs, gloo for CPU."""
    cpu_count: int
    """CPU cores this process may use: sizes DataLoader workers and threads."""
    run_folder: RunFolder | None = None
    """Where this run's checkpoints, metrics and reports go: the folder `scaletrain run` or
    a generated job chose (SCALETRAIN_RUN_DIR); None when started some other way."""

    @property
    def is_main(self) -> bool:
        """True on global rank 0, the process that prints and writes shared files."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def describe(self) -> str:
        """One line for logs: who launched how many processes where."""
        nodes = f"{self.num_nodes} node" + ("s" if self.num_nodes != 1 else "")
        return (
            f"{self.world_size} process(es) on {nodes} via {self.launcher}, "
            f"backend {self.backend}, rank {self.rank} on {self.device}"
        )


# Launchers that start one task per rank, each with a CPU (and GPU) allocation of its own.
_PER_TASK_LAUNCHERS = ("slurm", "mpi")


def is_per_task_launcher(launcher: str) -> bool:
    """True for srun and mpirun, whose tasks may each get their own CPUs and GPU."""
    return launcher in _PER_TASK_LAUNCHERS


def cpus_per_process(layout: ProcessLayout, environ: Mapping[str, str], allowed: int) -> int:
    """This rank's share of cores: its own task's under srun/mpirun, else an equal share of
    the cores that all local ranks of torchrun inherit from the one launcher process."""
    if is_per_task_launcher(layout.launcher):
        # Without CPU binding (TaskPlugin=task/none) every task sees the whole node, so
        # Slurm's allocation is the better bound.
        per_task = read_optional_int(environ, "SLURM_CPUS_PER_TASK")
        return max(1, min(allowed, per_task) if per_task else allowed)
    return max(1, allowed // layout.local_world_size)
