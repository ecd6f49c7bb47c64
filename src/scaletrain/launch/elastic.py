"""What torchrun's elastic restarts need to work, for local runs and Slurm jobs alike."""

from __future__ import annotations

# torchrun >= 2.4 keeps one TCPStore for all restarts of the worker group; restarted workers
# then read the previous attempt's addresses and fail with "Gloo connectFullMesh failed ...
# Connection refused" (pytorch/pytorch#135712, still so in 2.13). A store per attempt, hosted
# by rank 0, avoids that. Older torch ignores the variable.
RESTARTABLE_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def restart_variables(max_restarts: int) -> dict[str, str]:
    """Variables a torchrun-based launch with `max_restarts` needs (none without restarts)."""
    return dict(RESTARTABLE_STORE) if max_restarts > 0 else {}
