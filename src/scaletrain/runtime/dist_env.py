"""The one value that tells a training process who and where it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scaletrain.runtime.layout import ProcessLayout

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, slots=True)
class DistEnv(ProcessLayout):
    """A process's layout (rank, group sizes, rendezvous address) plus its device, backend
    and CPU share, as decided by scaletrain.init()."""

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
