"""Global batch splitting, epoch reshuffling and evaluation shards (single process)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import scaletrain as st
from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime import process_group
from scaletrain.train.data import EpochSampler, EvalSampler, per_rank_batch_size


def test_global_batch_is_divided_by_ranks_and_accumulation() -> None:
    assert per_rank_batch_size(256, world_size=8, accumulation_steps=2) == 16


def test_indivisible_global_batch_suggests_neighbours() -> None:
    with pytest.raises(ScaletrainError) as caught:
        per_rank_batch_size(100, world_size=3, accumulation_steps=1)
    assert "100 cannot be split evenly over 3 process(es)" in str(caught.value)
    assert "multiple of 3 (e.g. 99 or 102)" in caught.value.hint


def test_epoch_sampler_reshuffles_each_pass_and_honours_set_epoch() -> None:
    sampler = EpochSampler(range(20), num_replicas=1, rank=0, shuffle=True, seed=0)
    first, second = list(sampler), list(sampler)
    assert first != second and sorted(first) == sorted(second) == list(range(20))
    sampler.set_epoch(0)
    assert list(sampler) == first  # explicit epochs reproduce the order exactly
    sampler.set_epoch(0)
    assert list(sampler) == first  # set_epoch before each pass does not double-advance


def test_each_pass_is_the_next_epoch_as_set_epoch_numbers_them() -> None:
    # Pass k over the loader must be epoch k: the order DistributedSampler gives for
    # set_epoch(k), so that a resumed run (which sets its epoch) continues the same sequence.
    passes = EpochSampler(range(30), num_replicas=2, rank=1, shuffle=True, seed=7)
    orders = [list(passes) for _ in range(3)]
    for epoch, order in enumerate(orders):
        explicit = EpochSampler(range(30), num_replicas=2, rank=1, shuffle=True, seed=7)
        explicit.set_epoch(epoch)
        assert order == list(explicit), epoch
    assert passes.epoch == 2


def test_a_global_batch_of_one_sample_is_one_sample_per_step() -> None:
    assert per_rank_batch_size(1, world_size=1, accumulation_steps=1) == 1
    assert per_rank_batch_size(2, world_size=2, accumulation_steps=1) == 1


def test_epoch_sampler_resumes_the_rest_of_an_epoch_in_the_same_order() -> None:
    uninterrupted = EpochSampler(range(40), num_replicas=1, rank=0, shuffle=True, seed=3)
    uninterrupted.set_epoch(2)
    order = list(uninterrupted)
    resumed = EpochSampler(range(40), num_replicas=1, rank=0, shuffle=True, seed=3)
    resumed.start_at(2, skip=12)
    assert list(resumed) == order[12:]  # the rest, not a new shuffle
    assert list(resumed) != order  # the skip applies once; later passes are whole epochs
    assert len(list(resumed)) == 40


@pytest.mark.parametrize(("saved_by", "resumed_by"), [(4, 2), (2, 4), (1, 4)])
def test_mid_epoch_resume_with_another_number_of_ranks_skips_exactly_the_consumed(
    saved_by: int, resumed_by: int
) -> None:
    samples, global_batch, done = 96, 8, 5  # 5 global batches of epoch 1 were consumed

    def shards(world_size: int, skip_batches: int) -> list[list[int]]:
        result = []
        for rank in range(world_size):
            sampler = EpochSampler(
                range(samples), num_replicas=world_size, rank=rank, seed=0, drop_last=True
            )
            sampler.start_at(1, skip=skip_batches * global_batch // world_size)
            result.append(list(sampler))
        return result

    before = shards(saved_by, 0)
    per_rank = global_batch // saved_by
    consumed = {i for shard in before for i in shard[: done * per_rank]}
    rest = shards(resumed_by, done)
    remaining = [i for shard in rest for i in shard]
    assert len(remaining) == len(set(remaining)) == samples - len(consumed)
    assert set(remaining) == set(range(samples)) - consumed


def test_eval_sampler_covers_every_sample_exactly_once() -> None:
    shards = [list(EvalSampler(10, rank=r, world_size=3)) for r in range(3)]
    assert sorted(index for shard in shards for index in shard) == list(range(10))
    assert [len(s) for s in shards] == [4, 3, 3]


def test_loader_uses_forkserver_workers_within_this_ranks_cores(
    single_process: st.DistEnv,
) -> None:
    data = TensorDataset(torch.arange(32.0))
    default = st.loader(data, global_batch_size=8)
    assert default.num_workers == min(single_process.cpu_count - 1, 8)
    with_workers = st.loader(data, global_batch_size=8, num_workers=1)
    assert with_workers.multiprocessing_context.get_start_method() == "forkserver"
    batches = [batch[0] for batch in with_workers]
    assert len(batches) == 4 and all(len(b) == 8 for b in batches)


def _ignores_sigterm() -> bool:
    """What the kernel says (SigIgn in /proc), not Python's own table of handlers."""
    status = Path("/proc/self/status").read_text(encoding="utf-8").split("SigIgn:")[1].split()[0]
    return bool(int(status, 16) >> (signal.SIGTERM - 1) & 1)


class _WorkerFacts(Dataset[torch.Tensor]):
    """Each item: whether the process loading it ignores SIGTERM, and ran the user's init."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([_ignores_sigterm(), os.environ.get("USER_INIT_RAN") == "1"])


def _user_init(worker_id: int) -> None:
    os.environ["USER_INIT_RAN"] = "1"


def test_loader_workers_leave_sigterm_to_their_rank_and_run_the_users_init(
    single_process: st.DistEnv,
) -> None:
    """Slurm and torchrun send SIGTERM to every process of a rank: the rank saves and stops,
    its workers must not die of it first (torch's workers would)."""
    loader = st.loader(
        _WorkerFacts(), global_batch_size=2, num_workers=1, worker_init_fn=_user_init
    )
    assert torch.cat(list(loader)).all()
    assert not _ignores_sigterm()  # the rank itself still hears it


def test_loader_with_accumulation_loads_one_micro_batch_per_step(
    single_process: st.DistEnv,
) -> None:
    # One optimizer step sees the global batch: ranks × accumulation steps × micro-batch.
    # One rank accumulating 4 micro-batches of a global batch of 16 loads 4 samples at a time.
    data = TensorDataset(torch.arange(64.0))
    accumulating = st.loader(data, global_batch_size=16, accumulation_steps=4, num_workers=0)
    batches = [batch[0] for batch in accumulating]
    assert [len(batch) for batch in batches] == [4] * 16
    assert sorted(torch.cat(batches).tolist()) == list(range(64))  # every sample once
    with pytest.raises(ScaletrainError, match=r"1 process\(es\) × 3 accumulation step"):
        st.loader(data, global_batch_size=16, accumulation_steps=3)


def test_init_twice_returns_the_same_env_and_helpers_work_alone(
    single_process: st.DistEnv,
) -> None:
    assert st.init() is single_process
    assert single_process.launcher == "single" and single_process.world_size == 1
    assert st.mean(torch.tensor(3.0)) == 3.0 and st.total(2) == 2.0
    model = st.wrap(torch.nn.Linear(2, 2))
    assert isinstance(model, torch.nn.Linear)  # no DDP overhead for one process


def test_sync_batchnorm_on_cpu_warns_and_keeps_batchnorm(single_process: st.DistEnv) -> None:
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    with pytest.warns(UserWarning, match="SyncBatchNorm needs a GPU"):
        wrapped = st.wrap(net, sync_batchnorm_layers=True)
    assert isinstance(wrapped[1], torch.nn.BatchNorm2d)


def test_helpers_before_init_say_to_call_init() -> None:
    with pytest.raises(ScaletrainError, match=r"scaletrain.init\(\) has not been called"):
        st.loader(TensorDataset(torch.arange(4.0)), global_batch_size=2)


def _rank_of(rank: int, world_size: int, *, cpu_count: int = 1, device: str = "cpu") -> st.DistEnv:
    """What st.init() decides for rank `rank` of `world_size` (one node): the loaders read
    only this, so one process can build any rank's loader without a process group."""
    return st.DistEnv(
        launcher="torchrun", rank=rank, local_rank=rank, world_size=world_size,
        local_world_size=world_size, node_rank=0, num_nodes=1, master_addr="127.0.0.1",
        master_port=29500, device=torch.device(device), backend="gloo", cpu_count=cpu_count,
    )  # fmt: skip


@pytest.fixture
def as_rank(monkeypatch: pytest.MonkeyPatch) -> Callable[..., st.DistEnv]:
    def become(rank: int, world_size: int, **facts: Any) -> st.DistEnv:
        env = _rank_of(rank, world_size, **facts)
        monkeypatch.setattr(process_group, "_current", env)
        return env

    return become


def _epoch_order(size: int, seed: int, epoch: int = 0) -> list[int]:
    """DistributedSampler's shuffled order of an epoch: randperm seeded seed + epoch."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def test_each_rank_loads_its_round_robin_share_of_the_epochs_order(
    as_rank: Callable[..., st.DistEnv],
) -> None:
    # 70 samples over 4 ranks: 17 each (the 2 left over are dropped, not padded with repeats),
    # a global batch of 8 is 2 per rank, so 8 steps (the 17th sample of each rank is dropped
    # too: every step has the same size on every rank).
    data = TensorDataset(torch.arange(70))
    order = _epoch_order(70, seed=0)[:68]
    shards = []
    for rank in range(4):
        as_rank(rank, 4)
        batches = [batch[0].tolist() for batch in st.loader(data, global_batch_size=8)]
        assert batches == [order[rank::4][2 * b : 2 * b + 2] for b in range(8)]
        shards.append({index for batch in batches for index in batch})
    assert all(not a & b for a in shards for b in shards if a is not b)  # disjoint
    # Another seed, another order; without shuffling, the file's order.
    as_rank(1, 4)
    seeded = [batch[0].tolist() for batch in st.loader(data, global_batch_size=8, seed=5)]
    assert seeded[0] == _epoch_order(70, seed=5)[1:8:4]
    unshuffled = st.loader(data, global_batch_size=8, shuffle=False)
    assert next(iter(unshuffled))[0].tolist() == [1, 5]


def test_loader_options_follow_the_ranks_device_cores_and_seed(
    as_rank: Callable[..., st.DistEnv],
) -> None:
    data = TensorDataset(torch.arange(32.0))
    as_rank(3, 4, cpu_count=1)
    alone = st.loader(data, global_batch_size=8)
    # One core: the training loop's; no worker beside it. Not pinned on a CPU.
    assert (alone.num_workers, alone.pin_memory) == (0, False)
    # Worker random streams differ per rank and follow the seed: seed + rank.
    assert alone.generator.initial_seed() == 0 + 3
    assert st.loader(data, global_batch_size=8, seed=5).generator.initial_seed() == 5 + 3
    as_rank(3, 4, cpu_count=2, device="cuda:3")
    on_gpu = st.loader(data, global_batch_size=8)
    # 2 cores: 1 for a worker, which loads the next batches across epochs; pinned for the GPU.
    assert (on_gpu.num_workers, on_gpu.persistent_workers, on_gpu.pin_memory) == (1, True, True)
    assert st.loader(data, global_batch_size=8, num_workers=0).num_workers == 0


def test_eval_loader_gives_each_rank_every_world_size_th_sample(
    as_rank: Callable[..., st.DistEnv],
) -> None:
    # 10 samples, 3 ranks: rank 1 evaluates 1, 4, 7, in batches of ceil(4 / 3) = 2.
    data = TensorDataset(torch.arange(10))
    as_rank(1, 3, cpu_count=2)
    evaluation = st.eval_loader(data, global_batch_size=4, num_workers=0)
    assert [batch[0].tolist() for batch in evaluation] == [[1, 4], [7]]
    # A global batch of 3 over 3 ranks: one sample per rank and batch.
    singles = st.eval_loader(data, global_batch_size=3, num_workers=0)
    assert [batch[0].tolist() for batch in singles] == [[1], [4], [7]]
    assert evaluation.num_workers == 0 and evaluation.pin_memory is False
    assert evaluation.generator.initial_seed() == 1  # seed 0 + rank 1
    assert st.eval_loader(data, global_batch_size=4).num_workers == 1  # 2 cores - 1
