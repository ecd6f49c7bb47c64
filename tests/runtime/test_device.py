"""Device choice from local rank and visible GPUs, and per-rank CPU shares."""

from __future__ import annotations

import dataclasses

import pytest

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.device import DeviceChoice, backend_for, choose_device
from scaletrain.runtime.launchers import SINGLE_PROCESS
from scaletrain.runtime.layout import cpus_per_process

FOUR_PER_NODE = dataclasses.replace(
    SINGLE_PROCESS, launcher="torchrun", rank=6, local_rank=2, world_size=8, local_world_size=4
)


def test_no_gpu_means_cpu_and_gloo() -> None:
    device = choose_device(FOUR_PER_NODE, visible_count=0, environ={})
    assert str(device) == "cpu" and backend_for(device) == "gloo"


def test_all_gpus_visible_picks_the_local_rank() -> None:
    device = choose_device(FOUR_PER_NODE, visible_count=4, environ={})
    assert device == DeviceChoice("cuda", 2) and backend_for(device) == "nccl"


def test_one_visible_gpu_per_task_is_cuda_0_whatever_the_local_rank() -> None:
    # srun --gpus-per-task=1, or ROCR_VISIBLE_DEVICES=$SLURM_LOCALID as on LUMI.
    device = choose_device(FOUR_PER_NODE, visible_count=1, environ={"ROCR_VISIBLE_DEVICES": "2"})
    assert str(device) == "cuda:0"


def test_more_processes_than_visible_gpus_names_the_visibility_variable() -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        choose_device(FOUR_PER_NODE, visible_count=2, environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    message = str(caught.value)
    assert "only 2 are visible" in message and "CUDA_VISIBLE_DEVICES=0,1" in message
    assert "--nproc-per-node=2" in caught.value.hint


def test_hip_visibility_is_reported_too() -> None:
    layout = dataclasses.replace(FOUR_PER_NODE, local_rank=3, local_world_size=3)
    with pytest.raises(LaunchEnvironmentError, match="HIP_VISIBLE_DEVICES=0,1"):
        choose_device(layout, visible_count=2, environ={"HIP_VISIBLE_DEVICES": "0,1"})


def test_torchrun_ranks_share_the_cores_of_their_launcher() -> None:
    assert cpus_per_process(FOUR_PER_NODE, {}, allowed=56) == 14
    assert cpus_per_process(FOUR_PER_NODE, {}, allowed=2) == 1  # never zero


def test_srun_tasks_use_their_own_allocation() -> None:
    srun_task = dataclasses.replace(FOUR_PER_NODE, launcher="slurm")
    assert cpus_per_process(srun_task, {}, allowed=7) == 7  # bound mask, as on LUMI
    # Without binding every task sees the node; Slurm's allocation is the bound.
    assert cpus_per_process(srun_task, {"SLURM_CPUS_PER_TASK": "7"}, allowed=128) == 7
