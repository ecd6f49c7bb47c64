"""What Slurm tells a task of an `srun` step, read by all three launchers: its node list,
tasks per node, rank 0's address and port, and whether it is a task at all or a shell typed
into `srun --pty bash`.

Slurm says everything about a task itself: SLURM_PROCID (rank), SLURM_LOCALID (rank on its
node), SLURM_NODEID (its node in the step) and how many tasks each node runs. Those are read
as Slurm wrote them, so cyclic and uneven distributions (`SLURM_STEP_TASKS_PER_NODE=2(x3),1`)
come out right; values that contradict each other are an error naming the variables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

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
WORLD_SIZE_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
NODE_COUNT_VARIABLES = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
# Slurm's compressed count lists: "4(x2)", "2(x3),1", "3,2".
_TASK_COUNT = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def nodelist(environ: Mapping[str, str], *, of_job: bool = False) -> list[str]:
    """Hosts of this step (or of the whole job), in Slurm's order."""
    names: tuple[str, ...] = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if not of_job:
        names = ("SLURM_STEP_NODELIST", *names)
    compressed = first_set(environ, *names)
    if compressed is None:
        return []
    try:
        return list(hostlist.expand_hostlist(compressed))
    except hostlist.BadHostlist as error:
        raise LaunchEnvironmentError(
            f"Cannot read the Slurm node list {compressed!r}: {error}.",
            "do not set SLURM_*NODELIST by hand; run inside a Slurm job.",
        ) from None


def parse_task_counts(name: str, text: str) -> list[int]:
    """Slurm's task count list (`2(x3),1`) as one count per node, or an error naming `name`."""
    counts: list[int] = []
    for item in text.split(","):
        match = _TASK_COUNT.fullmatch(item.strip())
        if match is None or int(match[1]) < 1 or match[2] == "0":
            raise LaunchEnvironmentError(
                f"{name}={text!r} is not a Slurm task count list (such as '4(x2)' or '2(x3),1').",
                f"do not set {name} by hand; let srun set it, or unset it.",
            )
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def tasks_per_node(environ: Mapping[str, str], num_nodes: int, world_size: int) -> list[int] | None:
    """Tasks on each node of this step, from the first variable that describes this step:
    SLURM_STEP_TASKS_PER_NODE, the job's SLURM_TASKS_PER_NODE, or SLURM_NTASKS_PER_NODE."""
    step = environ.get("SLURM_STEP_TASKS_PER_NODE", "")
    if step:
        counts = parse_task_counts("SLURM_STEP_TASKS_PER_NODE", step)
        if sum(counts) != world_size or len(counts) != num_nodes:
            raise LaunchEnvironmentError(
                f"SLURM_STEP_TASKS_PER_NODE={step!r} means {sum(counts)} task(s) on "
                f"{len(counts)} node(s), but the step has {world_size} on {num_nodes}.",
                "do not set SLURM_* variables by hand; start the tasks with srun.",
            )
        return counts
    # The job's list fits a step only when the step fills the whole allocation.
    job = environ.get("SLURM_TASKS_PER_NODE", "")
    if job:
        counts = parse_task_counts("SLURM_TASKS_PER_NODE", job)
        if sum(counts) == world_size and len(counts) == num_nodes:
            return counts
    uniform = read_optional_int(environ, "SLURM_NTASKS_PER_NODE")
    if uniform is not None and uniform * num_nodes == world_size:
        return [uniform] * num_nodes
    return None


def tasks_on_this_node(environ: Mapping[str, str], world_size: int) -> int | None:
    """How many of a world of `world_size` tasks run on this node, when that world is this
    Slurm step; None when Slurm does not say, or when its step has another number of tasks
    (processes started by hand inside a larger allocation share the node among themselves)."""
    if read_optional_int(environ, *WORLD_SIZE_VARIABLES) != world_size:
        return None
    num_nodes = _node_count(environ)
    counts = tasks_per_node(environ, num_nodes, world_size)
    node = _node_index(environ, num_nodes)
    if counts is None or node is None or node >= len(counts):
        return None
    return counts[node]


def _node_count(environ: Mapping[str, str]) -> int:
    return (
        read_optional_int(environ, "SLURM_STEP_NUM_NODES")
        or len(nodelist(environ))
        or read_optional_int(environ, *NODE_COUNT_VARIABLES)
        or 1
    )


def _node_index(environ: Mapping[str, str], num_nodes: int) -> int | None:
    """This node's place in the step: its name's place in the step's node list, else
    SLURM_NODEID (which may count within the job instead)."""
    hosts, this_host = nodelist(environ), environ.get("SLURMD_NODENAME", "")
    if this_host in hosts:
        return hosts.index(this_host)
    node = read_optional_int(environ, "SLURM_NODEID")
    if node is not None:
        return node
    return 0 if num_nodes == 1 else None


def master_port(environ: Mapping[str, str]) -> int:
    """MASTER_PORT if set, else a port derived from the Slurm job id, else torchrun's default."""
    explicit = read_optional_int(environ, "MASTER_PORT")
    if explicit is not None:
        return explicit
    job_id = read_optional_int(environ, "SLURM_JOB_ID", "SLURM_JOBID")
    return port_for_job(job_id) if job_id is not None else DEFAULT_MASTER_PORT


def master_addr(environ: Mapping[str, str], *, of_job: bool = False) -> str:
    """MASTER_ADDR if set, else the first host of the step (or job), where rank 0 runs."""
    explicit = environ.get("MASTER_ADDR", "")
    if explicit:
        return explicit
    hosts = nodelist(environ, of_job=of_job)
    return hosts[0] if hosts else ""


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """What a process knows about itself beyond its environment (given in tests)."""

    pid: int
    stdin_is_terminal: bool

    @classmethod
    def of_this_process(cls) -> ProcessFacts:
        # os.isatty is False, not an error, for a closed stdin too.
        return cls(pid=os.getpid(), stdin_is_terminal=os.isatty(0))


def is_interactive_shell(environ: Mapping[str, str], process: ProcessFacts) -> bool:
    """A process started by hand in `srun --pty bash` (or salloc's shell), not by srun itself.

    The step of `srun --pty bash` in an allocation of N tasks says SLURM_NTASKS=N and
    SLURM_PROCID=0 to the shell and to everything started from it; read as an srun step, a
    plain `python train.py` there would wait forever for N-1 ranks. Such a process has the
    pty step's SLURM_PTY_PORT, reads the terminal, and is not the step's task itself (its
    shell is: SLURM_TASK_PID). Tasks of `srun` typed into that shell inherit SLURM_PTY_PORT
    but read a pipe (tests/runtime/test_launchers_on_slurm.py checks both on a real Slurm).
    """
    return (
        "SLURM_PTY_PORT" in environ
        and process.stdin_is_terminal
        and environ.get("SLURM_TASK_PID") != str(process.pid)
    )


def check_not_batch_step(environ: Mapping[str, str]) -> None:
    """Catch `python train.py` run in the batch script of a multi-task job (no srun)."""
    in_job = "SLURM_JOB_ID" in environ
    tasks = read_optional_int(environ, "SLURM_NTASKS")
    if in_job and "SLURM_STEP_ID" not in environ and tasks is not None and tasks > 1:
        raise LaunchEnvironmentError(
            f"This Slurm job asked for {tasks} tasks, but this process was started directly "
            "in the batch script (or salloc's shell), so it would wait forever for the other "
            "ranks.",
            "start the script with `srun python train.py` (one task per GPU), or with "
            "`srun torchrun ...` and --ntasks-per-node=1.",
        )


def read_step(environ: Mapping[str, str], launcher: str) -> ProcessLayout:
    """The layout of a task that srun started, as Slurm describes it."""
    world_size = read_optional_int(environ, *WORLD_SIZE_VARIABLES)
    if world_size is None:
        raise LaunchEnvironmentError(
            "SLURM_NTASKS is not set inside this srun step.",
            "request tasks explicitly, e.g. #SBATCH --ntasks-per-node=<GPUs per node>.",
        )
    num_nodes = _node_count(environ)
    node = _node_index(environ, num_nodes)
    if node is None:
        raise LaunchEnvironmentError(
            f"SLURM_NODEID is not set and this node ({environ.get('SLURMD_NODENAME', '?')}) is "
            f"not in the step's node list, so its place among {num_nodes} nodes is unknown.",
            "start the tasks with srun, which sets SLURM_NODEID.",
        )
    if node >= num_nodes:
        raise LaunchEnvironmentError(
            f"SLURM_NODEID={node} is outside 0..{num_nodes - 1} ({num_nodes} node(s) in the step).",
            "do not set SLURM_NODEID by hand; srun sets it for each task.",
        )
    counts = tasks_per_node(environ, num_nodes, world_size)
    local_world_size = counts[node] if counts else -(-world_size // num_nodes)
    local_rank = read_optional_int(environ, "SLURM_LOCALID")
    if local_rank is None:
        if local_world_size > 1:
            raise LaunchEnvironmentError(
                f"SLURM_LOCALID is not set, but {local_world_size} tasks run on this node: "
                "each would take the first GPU.",
                "start the tasks with srun, which sets SLURM_LOCALID, or export "
                "LOCAL_RANK yourself.",
            )
        local_rank = 0
    layout = ProcessLayout(
        launcher=launcher,
        rank=read_int(environ, "SLURM_PROCID"),
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=node,
        num_nodes=num_nodes,
        master_addr=master_addr(environ),
        master_port=master_port(environ),
    )
    return check_layout(layout, NAMES)


def is_srun_task(environ: Mapping[str, str], process: ProcessFacts) -> bool:
    """This process is a task of an srun step (not a shell someone started by hand in one)."""
    return (
        "SLURM_STEP_ID" in environ
        and "SLURM_PROCID" in environ
        and not is_interactive_shell(environ, process)
    )
