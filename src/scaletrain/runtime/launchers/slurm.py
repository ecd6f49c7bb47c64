"""Processes started by `srun`, one task per GPU, without torchrun."""

from __future__ import annotations

from collections.abc import Mapping

import hostlist

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.core.job_port import port_for_job
from scaletrain.runtime.layout import (
    DEFAULT_MASTER_PORT,
    ProcessLayout,
    VariableNames,
    check_layout,
    first_set,
    read_int,
    read_optional_int,
)

NAMES = VariableNames(rank="SLURM_PROCID", world_size="SLURM_NTASKS", local_rank="SLURM_LOCALID")


def nodelist(environ: Mapping[str, str]) -> list[str]:
    """Hosts of this step (or of the whole job when outside a step), in Slurm's order."""
    compressed = first_set(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if compressed is None:
        return []
    try:
        return list(hostlist.expand_hostlist(compressed))
    except hostlist.BadHostlist as error:
        raise LaunchEnvironmentError(
            f"Cannot read the Slurm node list {compressed!r}: {error}.",
            "do not set SLURM_*NODELIST by hand; run inside a Slurm job.",
        ) from None


def tasks_on_this_node(environ: Mapping[str, str]) -> int | None:
    """How many tasks of this step run on this node, from SLURM_STEP_TASKS_PER_NODE."""
    compressed = first_set(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if compressed is None:
        return None
    try:
        per_node = hostlist.parse_slurm_tasks_per_node(compressed)
    except hostlist.BadHostlist as error:
        raise LaunchEnvironmentError(
            f"Cannot read Slurm's tasks per node {compressed!r}: {error}.",
            "do not set SLURM_*TASKS_PER_NODE by hand; run inside a Slurm job.",
        ) from None
    hosts = nodelist(environ)
    this_host = environ.get("SLURMD_NODENAME", "")
    # The node's position in the step's list; SLURM_NODEID counts within the job instead.
    index = (
        hosts.index(this_host) if this_host in hosts else read_optional_int(environ, "SLURM_NODEID")
    )
    if index is None or not 0 <= index < len(per_node):
        return None
    return int(per_node[index])


def master_port(environ: Mapping[str, str]) -> int:
    """MASTER_PORT if set, else a port derived from the Slurm job id, else torchrun's default."""
    explicit = read_optional_int(environ, "MASTER_PORT")
    if explicit is not None:
        return explicit
    job_id = read_optional_int(environ, "SLURM_JOB_ID", "SLURM_JOBID")
    return port_for_job(job_id) if job_id is not None else DEFAULT_MASTER_PORT


def master_addr(environ: Mapping[str, str]) -> str:
    """MASTER_ADDR if set, else the first host of the step, where rank 0 runs."""
    explicit = environ.get("MASTER_ADDR", "")
    if explicit:
        return explicit
    hosts = nodelist(environ)
    return hosts[0] if hosts else ""


def check_not_batch_step(environ: Mapping[str, str]) -> None:
    """Catch `python train.py` run in the batch script of a multi-task job (no srun)."""
    in_job = "SLURM_JOB_ID" in environ
    tasks = read_optional_int(environ, "SLURM_NTASKS")
    if in_job and "SLURM_STEP_ID" not in environ and tasks is not None and tasks > 1:
        raise LaunchEnvironmentError(
            f"This Slurm job asked for {tasks} tasks, but this process was started directly "
            "in the batch script, so it would wait forever for the other ranks.",
            "start the script with `srun python train.py` (one task per GPU), or with "
            "`srun torchrun ...` and --ntasks-per-node=1.",
        )


class SlurmLauncher:
    """Reads SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS of an `srun` step."""

    name = "slurm"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ

    @staticmethod
    def read(environ: Mapping[str, str]) -> ProcessLayout:
        world_size = read_optional_int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
        if world_size is None:
            raise LaunchEnvironmentError(
                "SLURM_NTASKS is not set inside this srun step.",
                "request tasks explicitly, e.g. #SBATCH --ntasks-per-node=<GPUs per node>.",
            )
        num_nodes = read_optional_int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or 1
        local_world_size = tasks_on_this_node(environ) or -(-world_size // num_nodes)
        layout = ProcessLayout(
            launcher=SlurmLauncher.name,
            rank=read_int(environ, "SLURM_PROCID"),
            local_rank=read_optional_int(environ, "SLURM_LOCALID") or 0,
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=read_optional_int(environ, "SLURM_NODEID") or 0,
            num_nodes=num_nodes,
            master_addr=master_addr(environ),
            master_port=master_port(environ),
        )
        return check_layout(layout, NAMES)
