"""The one value that tells a training process who and where it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, slots=True)
class DistEnv:
    """Rank, group sizes, rendezvous address, device and backend of this process."""

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
    device: torch.device
    backend: str
    """torch.distributed backend: nccl (RCCL on ROCm) for GPUs, gloo for CPU."""
    cpu_count: int
    """CPU cores this process may use: sizes DataLoader workers and threads."""

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
