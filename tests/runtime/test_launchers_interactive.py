"""Launcher detection in interactive shells: python or srun typed into `srun --pty bash`,
variables typed by hand, processes started by hand in a larger allocation."""

from __future__ import annotations

import os

from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.launchers.slurm_step import ProcessFacts, tasks_on_this_node
from tests.support.launcher_environments import CYCLIC_UNEVEN, SLURM_STEP, TORCHRUN

# `srun --pty bash` in `salloc --ntasks-per-node=4`, then `python train.py` typed in that shell:
# the step says 4 tasks and rank 0, but only this one process exists.
INTERACTIVE_SHELL = {
    "SLURM_JOB_ID": "901",
    "SLURM_JOB_NAME": "interactive",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "4",
    "SLURM_STEP_NODELIST": "n1",
    "SLURM_PTY_PORT": "41235",
    "SLURM_TASK_PID": "4242",
}


# The shell (the step's task, pid 4242) reads the terminal; python typed into it is its child.
TYPED_IN = ProcessFacts(pid=5000, stdin_is_terminal=True)


def test_python_typed_into_an_interactive_srun_pty_shell_is_one_process() -> None:
    layout = detect_layout(INTERACTIVE_SHELL, TYPED_IN)
    assert layout.launcher == "interactive"
    assert (layout.rank, layout.world_size) == (0, 1)


def test_tasks_of_srun_typed_into_the_shell_are_an_srun_step() -> None:
    # They inherit SLURM_PTY_PORT, but read a pipe from srun, not the terminal.
    step = {**INTERACTIVE_SHELL, "SLURM_STEP_ID": "1", "SLURM_NTASKS": "2",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_PROCID": "1",
            "SLURM_LOCALID": "1", "MASTER_ADDR": "n1"}  # fmt: skip
    layout = detect_layout(step, ProcessFacts(pid=5001, stdin_is_terminal=False))
    assert (layout.launcher, layout.rank, layout.world_size) == ("slurm", 1, 2)
    # The same with an MPI plugin (`srun --mpi=pmix`): Slurm's numbers, read as MPI's.
    pmix = detect_layout({**step, "PMIX_RANK": "1"}, ProcessFacts(5001, stdin_is_terminal=False))
    assert (pmix.launcher, pmix.rank, pmix.world_size, pmix.local_rank) == ("mpi", 1, 2, 1)


def test_this_process_knows_its_pid_and_whether_its_stdin_is_a_terminal() -> None:
    saved_stdin = os.dup(0)
    terminal, terminal_side = os.openpty()
    read_end, write_end = os.pipe()
    try:
        os.dup2(terminal_side, 0)
        assert ProcessFacts.of_this_process() == ProcessFacts(os.getpid(), stdin_is_terminal=True)
        os.dup2(read_end, 0)
        assert ProcessFacts.of_this_process() == ProcessFacts(os.getpid(), stdin_is_terminal=False)
        os.close(0)
        assert not ProcessFacts.of_this_process().stdin_is_terminal
    finally:
        os.dup2(saved_stdin, 0)
        for fd in (saved_stdin, terminal, terminal_side, read_end, write_end):
            os.close(fd)


def test_srun_pty_python_itself_is_the_steps_task() -> None:
    one_task = {**INTERACTIVE_SHELL, "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1",
                "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_TASK_PID": "5000"}  # fmt: skip
    assert detect_layout(one_task, TYPED_IN).launcher == "slurm"


def test_env_variables_typed_into_an_interactive_shell_are_read_as_env() -> None:
    # Even where they repeat the shell step's own numbers (rank 0 of 4): the shell is no srun
    # task, and the processes typed in it are the ones the variables describe.
    typed = {**INTERACTIVE_SHELL, "RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
             "MASTER_ADDR": "n1"}  # fmt: skip
    assert detect_layout(typed, TYPED_IN).launcher == "env"


def test_torchrun_typed_into_an_interactive_shell_is_torchrun() -> None:
    layout = detect_layout({**INTERACTIVE_SHELL, **TORCHRUN}, TYPED_IN)
    assert layout.launcher == "torchrun" and layout.world_size == 8


def test_env_variables_that_repeat_the_srun_task_are_read_as_slurm() -> None:
    # Generated per-GPU jobs export RANK/WORLD_SIZE/LOCAL_RANK for unconverted env:// scripts.
    environ = {**SLURM_STEP, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    assert detect_layout(environ).launcher == "slurm"
    # Different numbers mean someone else set them on purpose: env:// wins, as before.
    moved = {**environ, "RANK": "2", "LOCAL_RANK": "2", "MASTER_ADDR": "nid005000"}
    assert detect_layout(moved).launcher == "env"


def test_env_variables_of_renumbered_srun_tasks_count_this_nodes_tasks_from_slurm() -> None:
    # A wrapper around srun's tasks numbers them node by node (RANK=<first rank of its node> +
    # SLURM_LOCALID), not round the nodes as --distribution=cyclic does: RANK differs from
    # SLURM_PROCID, so env:// is read, and without LOCAL_WORLD_SIZE Slurm says how many tasks
    # share this node: 2 on the first node of CYCLIC_UNEVEN (2(x3),1), 1 on the last.
    first = {**CYCLIC_UNEVEN, "RANK": "1", "WORLD_SIZE": "7", "LOCAL_RANK": "1",
             "MASTER_ADDR": "n1"}  # fmt: skip
    layout = detect_layout(first)
    assert (layout.launcher, layout.rank, layout.local_world_size) == ("env", 1, 2)
    last = {**first, "SLURM_NODEID": "3", "SLURMD_NODENAME": "n4", "SLURM_PROCID": "3",
            "SLURM_LOCALID": "0", "RANK": "6", "LOCAL_RANK": "0"}  # fmt: skip
    assert detect_layout(last).local_world_size == 1
    # A wrapper that sets no LOCAL_RANK: SLURM_LOCALID, the task's place on its node, is it.
    without_local_rank = {k: v for k, v in first.items() if k != "LOCAL_RANK"}
    assert detect_layout(without_local_rank).local_rank == 1
    # Task 5 of 8 cyclic on 2 nodes (second node, third there), renumbered 6; no list but
    # SLURM_NTASKS_PER_NODE=4.
    env = {"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "MASTER_ADDR": "nid005000"}
    cyclic = {**SLURM_STEP, "SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4", **env}
    cyclic.pop("SLURM_STEP_TASKS_PER_NODE")
    layout = detect_layout(cyclic)
    assert (layout.launcher, layout.local_world_size, layout.num_nodes) == ("env", 4, 2)
    # Where Slurm does not say this node's count, the layout is the one without Slurm: this
    # host not in the list and no SLURM_NODEID; SLURM_NODEID outside the step's 2 nodes; no
    # count list at all.
    placeless = {**cyclic, "SLURMD_NODENAME": "localhost"}
    placeless.pop("SLURM_NODEID")
    outside = {**cyclic, "SLURMD_NODENAME": "localhost", "SLURM_NODEID": "2"}
    uncounted = {k: v for k, v in cyclic.items() if k != "SLURM_NTASKS_PER_NODE"}
    for environ in (placeless, outside, uncounted):
        assert detect_layout(environ) == detect_layout(env)


def test_a_one_node_step_count_list_is_this_nodes_count() -> None:
    # SLURM_STEP_TASKS_PER_NODE=4 on the step's only node: those 4 tasks run here, though this
    # host is not named in the node list and SLURM_NODEID is unset (a trimmed environment).
    trimmed = {"SLURM_NTASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "4",
               "SLURM_STEP_NODELIST": "n1", "SLURMD_NODENAME": "localhost"}  # fmt: skip
    assert tasks_on_this_node(trimmed, 4) == 4
    # The same numbers for another world (2 processes started by hand in that 4-task
    # allocation) say nothing about how many of those 2 share the node.
    assert tasks_on_this_node(trimmed, 2) is None


def test_processes_started_by_hand_in_a_larger_allocation_share_the_node_among_themselves() -> None:
    # `salloc -n 4 --cpus-per-task 8` on one node, then `RANK=0 WORLD_SIZE=2 python train.py &`
    # twice in its shell: Slurm's 4 tasks are not these 2 processes, so each gets half the
    # node's share, not a quarter.
    allocation = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "4",
                  "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NUM_NODES": "1",
                  "SLURMD_NODENAME": "n1", "SLURM_NODEID": "0"}  # fmt: skip
    hand_started = {**allocation, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                    "MASTER_ADDR": "127.0.0.1"}  # fmt: skip
    layout = detect_layout(hand_started)
    assert (layout.launcher, layout.world_size, layout.local_world_size) == ("env", 2, 2)
    # All 4 of Slurm's tasks, numbered by hand: Slurm's count of this node's tasks holds.
    assert detect_layout({**hand_started, "WORLD_SIZE": "4"}).local_world_size == 4
