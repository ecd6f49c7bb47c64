"""DataLoaders from a global batch size, sharded across ranks."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.child_processes import ignore_stop_signal
from scaletrain.runtime.layout import DistEnv
from scaletrain.runtime.process_group import current_env

# More workers rarely help a single GPU and each one costs memory.
MAX_WORKERS = 8


class EpochSampler(DistributedSampler[Any]):
    """A DistributedSampler that moves to the next epoch by itself.

    Forgetting `set_epoch` makes every epoch repeat the same order; here each new pass over
    the loader reshuffles. Calling `set_epoch(e)` still works and takes precedence.
    `start_at` lets a resumed run continue the rest of an epoch in the same order.
    """

    def __init__(self, dataset: Dataset[Any], **options: Any) -> None:
        super().__init__(dataset, **options)
        self._started = False
        self._epoch_was_set = False
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self._epoch_was_set = True

    def start_at(self, epoch: int, *, skip: int) -> None:
        """Make the next pass epoch `epoch` without the first `skip` indices of this rank.

        The order is the epoch's usual one, so skipping what was consumed continues it. For
        any number of ranks, skipping b × (global batch / ranks) per rank leaves out exactly
        the first b global batches: each global batch is a contiguous block of the epoch's
        permutation, dealt round-robin to the ranks.
        """
        self.set_epoch(epoch)
        self._skip = skip

    def __iter__(self) -> Iterator[Any]:
        if self._started and not self._epoch_was_set:
            self.epoch += 1
        self._started = True
        self._epoch_was_set = False
        skip, self._skip = self._skip, 0
        return itertools.islice(super().__iter__(), skip, None)


class EvalSampler(Sampler[int]):
    """Every sample exactly once over all ranks (rank r takes r, r+W, ...): exact metrics,
    no duplicated padding, at the price of shards that differ in length by at most one."""

    def __init__(self, dataset_size: int, *, rank: int, world_size: int) -> None:
        self.indices = range(rank, dataset_size, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def per_rank_batch_size(global_batch_size: int, world_size: int, accumulation_steps: int) -> int:
    """The micro-batch each rank loads so that one optimizer step sees `global_batch_size`."""
    shares = world_size * accumulation_steps
    if global_batch_size < 1 or global_batch_size % shares != 0:
        lower = max(shares, global_batch_size // shares * shares)
        raise ScaletrainError(
            f"The global batch size {global_batch_size} cannot be split evenly over "
            f"{world_size} process(es) × {accumulation_steps} accumulation step(s).",
            f"use a multiple of {shares} (e.g. {lower} or {lower + shares}), "
            "or change the number of processes or accumulation steps.",
        )
    return global_batch_size // shares


def worker_count(env: DistEnv) -> int:
    """DataLoader workers for this rank: its CPU cores minus one for the training loop."""
    return max(0, min(env.cpu_count - 1, MAX_WORKERS))


def _loader_options(
    env: DistEnv, num_workers: int | None, seed: int, given: dict[str, Any]
) -> dict[str, Any]:
    """The DataLoader's options: ours, then the caller's (`given`) over them."""
    workers = worker_count(env) if num_workers is None else num_workers
    options: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": env.device.type == "cuda",
        # Seeds the workers' RNG the same way in every run (augmentations stay reproducible).
        "generator": torch.Generator().manual_seed(seed + env.rank),
    }
    if workers > 0:
        # fork after CUDA/NCCL initialisation can crash workers; the seeds recommend spawn,
        # forkserver gives the same safety with faster start-up.
        options["multiprocessing_context"] = "forkserver"
        options["persistent_workers"] = True
        # SIGTERM is the rank's to handle (save, stop); the workers end with the rank.
        given = given | {
            "worker_init_fn": functools.partial(ignore_stop_signal, given.get("worker_init_fn"))
        }
    return options | given


def loader(
    dataset: Dataset[Any],
    *,
    global_batch_size: int,
    shuffle: bool = True,
    accumulation_steps: int = 1,
    seed: int = 0,
    num_workers: int | None = None,
    **dataloader_options: Any,
) -> DataLoader[Any]:
    """A training DataLoader whose batches over all ranks add up to `global_batch_size`.

    Each rank reads a disjoint shard of every epoch (the tail that does not fill a global
    batch is dropped, so every step has the same size on every rank) and the order changes
    every epoch even without `set_epoch`.
    """
    env = current_env()
    batch_size = per_rank_batch_size(global_batch_size, env.world_size, accumulation_steps)
    sampler = EpochSampler(
        dataset,
        num_replicas=env.world_size,
        rank=env.rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=True,
    )
    options = _loader_options(env, num_workers, seed, dataloader_options)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, **options)


def eval_loader(
    dataset: Dataset[Any],
    *,
    global_batch_size: int,
    num_workers: int | None = None,
    **dataloader_options: Any,
) -> DataLoader[Any]:
    """An evaluation DataLoader that visits every sample exactly once across all ranks.

    Sum counts with `scaletrain.total` (not `mean`) because shards may differ by one sample.
    """
    env = current_env()
    sampler = EvalSampler(len(dataset), rank=env.rank, world_size=env.world_size)  # type: ignore[arg-type]
    batch_size = max(1, math.ceil(global_batch_size / env.world_size))
    options = _loader_options(env, num_workers, 0, dataloader_options)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **options)
