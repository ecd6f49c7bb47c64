"""Waits between ranks that may last long: rank 0 preparing data, ranks finishing at different
times. They run on the rendezvous store, not as collectives of the training's group.

A collective has the group's timeout, NCCL's 10 minutes by default, after which NCCL's
watchdog ends the process; a data download on rank 0 can take longer. PyTorch documents
the store (`torch.distributed.Store`: `add`, `set`, `wait(keys, timeout)`) for such waits:
each wait gets a timeout of its own, no GPU and no stream are involved, and every rank
already holds a connection to the store, so no socket is added.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from scaletrain.core.errors import ScaletrainError

if TYPE_CHECKING:
    from torch.distributed.distributed_c10d import Store

# Longer than any data preparation, shorter than the longest jobs: a rank that died ends the
# job through its launcher long before this (srun --kill-on-bad-exit, torchrun).
DEFAULT_LONG_WAIT = timedelta(hours=24)


class LongWaits:
    """Barriers and "these ranks are done" signals on a store, with a timeout per wait.

    Every rank makes the same calls in the same order (as for collectives): each call gets
    the next key, so waits never mix.
    """

    def __init__(self, store: Store, world_size: int) -> None:
        from torch.distributed.distributed_c10d import PrefixStore

        self._store = PrefixStore("scaletrain-waits", store)
        self._world_size = world_size
        self._calls = 0

    def new_key(self, what: str) -> str:
        """The key of the next wait (the same on every rank that makes the same calls)."""
        self._calls += 1
        return f"{what}-{self._calls}"

    def arrive(self, key: str, expected: int) -> None:
        """Count this rank in; the last of `expected` ranks marks the wait as over."""
        if self._store.add(key, 1) == expected:
            self._store.set(f"{key}/done", "1")

    def wait(self, key: str, timeout: timedelta, waiting_for: str) -> None:
        """Block until `expected` ranks arrived at `key`; `waiting_for` names them in errors."""
        try:
            self._store.wait([f"{key}/done"], timeout)
        except Exception as error:  # DistStoreError: the timeout, or the store is gone
            raise ScaletrainError(
                f"Waited {timeout} for {waiting_for}: {str(error).splitlines()[0][:200]}",
                "look at the other ranks' output for what they were doing; pass a longer "
                "timeout (st.rank_zero_first(timeout=...), st.barrier(timeout=...)) when "
                "that work really takes longer.",
            ) from error

    def barrier(self, timeout: timedelta = DEFAULT_LONG_WAIT) -> None:
        """Return on every rank once every rank has arrived."""
        key = self.new_key("barrier")
        self.arrive(key, self._world_size)
        self.wait(key, timeout, f"all {self._world_size} ranks to reach the barrier")
