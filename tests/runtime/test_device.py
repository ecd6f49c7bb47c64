"""Device choice from local rank and visible GPUs, per-rank CPU shares, and the line that
init prints about them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.device import (
    DeviceChoice,
    backend_for,
    choose_device,
    parse_device,
    visible_gpus,
)
from scaletrain.runtime.launchers import SINGLE_PROCESS
from scaletrain.runtime.layout import DistEnv, ProcessLayout, cpus_per_process
from scaletrain.runtime.process_group import init

FOUR_PER_NODE = dataclasses.replace(
    SINGLE_PROCESS, launcher="torchrun", rank=6, local_rank=2, world_size=8, local_world_size=4
)


def test_no_gpu_means_cpu_and_gloo() -> None:
    device = choose_device(FOUR_PER_NODE, visible_count=0, environ={})
    assert str(device) == "cpu" and backend_for(device) == "gloo"
    hidden = choose_device(FOUR_PER_NODE, visible_count=0, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert str(hidden) == "cpu"


@pytest.mark.parametrize(
    "environ",
    [
        {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        {"ROCR_VISIBLE_DEVICES": "2"},
        {"CUDA_VISIBLE_DEVICES": "GPU-8a1e0c3e-7f0e-4b0c-9d5e-1f2a3b4c5d6e"},
        {"SLURM_GPUS_ON_NODE": "4"},
    ],
)
def test_a_process_given_gpus_that_torch_cannot_see_is_an_error(environ: dict[str, str]) -> None:
    # A CPU-only PyTorch in a GPU job, or a broken driver: training on the CPU unnoticed
    # would burn the GPU allocation for nothing.
    with pytest.raises(LaunchEnvironmentError) as caught:
        choose_device(FOUR_PER_NODE, visible_count=0, environ=environ)
    name, value = next(iter(environ.items()))
    assert f"given GPUs ({name}={value}) but torch sees none" in caught.value.problem
    assert "init(device='cpu')" in caught.value.hint


def test_visibility_lists_of_numbers_and_uuids() -> None:
    uuids = "GPU-8a1e0c3e-7f0e-4b0c-9d5e-1f2a3b4c5d6e,GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": uuids}) == tuple(uuids.split(","))
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpus({}) is None
    # HIP and CUDA pick by position from what ROCR left visible.
    rocr_then_hip = {"ROCR_VISIBLE_DEVICES": "4,5,6", "HIP_VISIBLE_DEVICES": "2"}
    assert visible_gpus(rocr_then_hip) == ("6",)
    assert visible_gpus({"ROCR_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "1,7"}) == ("5",)


@pytest.mark.parametrize("visible", ["0,1,2,3", "GPU-a,GPU-b,GPU-c,GPU-d"])
def test_torchrun_ranks_sharing_the_node_s_list_pick_their_local_rank(visible: str) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": visible}
    count = len(visible_gpus(environ) or ())
    assert choose_device(FOUR_PER_NODE, count, environ) == DeviceChoice("cuda", 2)


def test_torchrun_with_fewer_visible_gpus_than_processes_is_scaletrain_s_error() -> None:
    # `scaletrain run --nproc 2` on a 1-GPU machine: both ranks on cuda:0 would crash in
    # NCCL ("Duplicate GPU detected"); say so before any GPU code runs.
    two_local = dataclasses.replace(FOUR_PER_NODE, local_rank=1, local_world_size=2)
    for launcher in ("torchrun", "env", "single"):
        layout = dataclasses.replace(two_local, launcher=launcher)
        with pytest.raises(LaunchEnvironmentError) as caught:
            choose_device(layout, visible_count=1, environ={"CUDA_VISIBLE_DEVICES": "0"})
        assert "started 2 processes on this node but only 1 GPU(s) are visible" in str(caught.value)
        assert "--nproc-per-node=1" in caught.value.hint


def test_all_gpus_visible_picks_the_local_rank() -> None:
    device = choose_device(FOUR_PER_NODE, visible_count=4, environ={})
    assert device == DeviceChoice("cuda", 2) and backend_for(device) == "nccl"


def test_one_visible_gpu_per_srun_or_mpi_task_is_cuda_0_whatever_the_local_rank() -> None:
    # srun --gpus-per-task=1, or ROCR_VISIBLE_DEVICES=$SLURM_LOCALID as on LUMI.
    for launcher in ("slurm", "mpi"):
        task = dataclasses.replace(FOUR_PER_NODE, launcher=launcher)
        device = choose_device(task, visible_count=1, environ={"ROCR_VISIBLE_DEVICES": "2"})
        assert str(device) == "cuda:0"


def test_more_processes_than_visible_gpus_names_the_visibility_variable() -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        choose_device(FOUR_PER_NODE, visible_count=2, environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    message = str(caught.value)
    assert "only 2 GPU(s) are visible" in message and "CUDA_VISIBLE_DEVICES=0,1" in message
    assert "--nproc-per-node=2" in caught.value.hint


def test_hip_visibility_is_reported_too() -> None:
    layout = dataclasses.replace(FOUR_PER_NODE, local_rank=3, local_world_size=3)
    with pytest.raises(LaunchEnvironmentError, match="HIP_VISIBLE_DEVICES=0,1"):
        choose_device(layout, visible_count=2, environ={"HIP_VISIBLE_DEVICES": "0,1"})


def test_torchrun_ranks_share_the_cores_of_their_launcher() -> None:
    assert cpus_per_process(FOUR_PER_NODE, {}, allowed=56) == 14
    assert cpus_per_process(FOUR_PER_NODE, {}, allowed=10) == 2  # whole cores: 10 // 4
    assert cpus_per_process(FOUR_PER_NODE, {}, allowed=2) == 1  # never zero


def test_srun_tasks_use_their_own_allocation() -> None:
    srun_task = dataclasses.replace(FOUR_PER_NODE, launcher="slurm")
    assert cpus_per_process(srun_task, {}, allowed=7) == 7  # bound mask, as on LUMI
    # Without binding every task sees the node; Slurm's allocation is the bound.
    assert cpus_per_process(srun_task, {"SLURM_CPUS_PER_TASK": "7"}, allowed=128) == 7
    # A task bound to one core (srun --cpus-per-task=1) has that one.
    assert cpus_per_process(srun_task, {"SLURM_CPUS_PER_TASK": "1"}, allowed=128) == 1
    assert cpus_per_process(srun_task, {}, allowed=1) == 1


def test_the_start_up_line_says_how_many_processes_on_how_many_nodes() -> None:
    def line(layout: ProcessLayout) -> str:
        fields = {f.name: getattr(layout, f.name) for f in dataclasses.fields(layout)}
        env = DistEnv(**fields, device=torch.device("cpu"), backend="gloo", cpu_count=1)
        return env.describe()

    assert line(SINGLE_PROCESS) == "1 process(es) on 1 node via single, backend gloo, rank 0 on cpu"
    two_nodes = dataclasses.replace(FOUR_PER_NODE, num_nodes=2, node_rank=1)
    assert line(two_nodes) == "8 process(es) on 2 nodes via torchrun, backend gloo, rank 6 on cpu"


def test_device_names_for_init() -> None:
    assert parse_device("cuda") == DeviceChoice("cuda", None)  # chosen as without device=
    assert parse_device("cuda:3") == DeviceChoice("cuda", 3)
    assert parse_device("cpu") == DeviceChoice("cpu", None)
    with pytest.raises(LaunchEnvironmentError, match="'gpu0' is not a device"):
        parse_device("gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the answer of a machine without GPUs")
def test_init_with_device_cuda_and_no_gpu_says_so_before_joining() -> None:
    with pytest.raises(LaunchEnvironmentError, match="device='cuda' was asked for, but torch"):
        init(device="cuda", environ={})
