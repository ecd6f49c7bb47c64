"""Launcher detection from environment dicts, one test per branch a user can hit."""

from __future__ import annotations

import os

import pytest

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.launchers.slurm_step import ProcessFacts, tasks_on_this_node

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "5",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "nid001",
    "MASTER_PORT": "29400",
}

# What srun sets in task 5 of `srun --nodes=2 --ntasks-per-node=4` (as seen on a real Slurm).
SLURM_STEP = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "nid[005000-005001]",
    "SLURM_JOB_NODELIST": "nid[005000-005001]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURMD_NODENAME": "nid005001",
}


def test_torchrun_variables_give_the_full_layout() -> None:
    layout = detect_layout(TORCHRUN)
    assert layout.launcher == "torchrun"
    assert (layout.rank, layout.local_rank, layout.world_size) == (5, 1, 8)
    assert (layout.local_world_size, layout.node_rank, layout.num_nodes) == (4, 1, 2)
    assert (layout.master_addr, layout.master_port) == ("nid001", 29400)


def test_torchrun_wins_over_slurm_variables_under_srun_torchrun() -> None:
    layout = detect_layout({**SLURM_STEP, **TORCHRUN})
    assert layout.launcher == "torchrun"
    assert layout.rank == 5 and layout.master_addr == "nid001"


def test_hand_set_env_variables_without_torchrun_are_read_as_env() -> None:
    environ = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h1"}
    layout = detect_layout(environ)
    assert layout.launcher == "env"
    assert layout.local_world_size == 2 and layout.num_nodes == 1 and layout.node_rank == 0
    assert layout.master_port == 29500  # torchrun's default when MASTER_PORT is not set


def test_torchrun_nodes_with_different_process_counts_keep_group_rank_and_size() -> None:
    # torchrun --nproc-per-node=2 on two nodes and 4 on a third: the third node (GROUP_RANK=2
    # of GROUP_WORLD_SIZE=3) runs ranks 4..7, so rank // LOCAL_WORLD_SIZE is not its node.
    environ = {**TORCHRUN, "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
               "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "3"}  # fmt: skip
    layout = detect_layout(environ)
    assert (layout.node_rank, layout.num_nodes) == (2, 3)
    # Hand-set variables name the node NODE_RANK (as Lightning does).
    hand_set = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                "NODE_RANK": "2", "MASTER_ADDR": "n1"}  # fmt: skip
    assert detect_layout(hand_set).node_rank == 2
    # Without a node count: 6 processes, at most 4 per node, need 2 nodes.
    six = {"RANK": "1", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "MASTER_ADDR": "n1"}  # fmt: skip
    assert (detect_layout(six).num_nodes, detect_layout(six).node_rank) == (2, 0)


def test_hand_set_single_process_needs_no_local_rank_or_master_addr() -> None:
    layout = detect_layout({"RANK": "0", "WORLD_SIZE": "1"})
    assert (layout.launcher, layout.local_rank, layout.local_world_size) == ("env", 0, 1)
    assert layout.master_addr == "127.0.0.1"


def test_lumi_seed_style_rank_from_slurm_localid() -> None:
    # 003_*: srun bash -c "RANK=$SLURM_PROCID ..." without LOCAL_RANK: SLURM_LOCALID fills in.
    environ = {**SLURM_STEP, "RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "nid005000"}
    environ.pop("SLURM_LOCALID")
    environ["SLURM_LOCALID"] = "1"
    layout = detect_layout(environ)
    assert layout.local_rank == 1 and layout.local_world_size == 4


def test_missing_local_rank_with_several_processes_names_the_variable() -> None:
    with pytest.raises(LaunchEnvironmentError, match="LOCAL_RANK is not set"):
        detect_layout({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"})


def test_rank_not_below_world_size_names_both_variables() -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout({**TORCHRUN, "RANK": "8"})
    assert "RANK=8" in str(caught.value) and "WORLD_SIZE=8" in str(caught.value)
    assert "do not set RANK by hand" in caught.value.hint


def test_missing_master_addr_with_world_size_above_one_says_how_to_set_it() -> None:
    environ = {k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR is not set") as caught:
        detect_layout(environ)
    assert "scontrol show hostnames" in caught.value.hint
    # Two processes need it as much as eight.
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR is not set, but 2 processes"):
        detect_layout({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE"])
def test_torchrun_without_rank_or_world_size_names_it(missing: str) -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout({k: v for k, v in TORCHRUN.items() if k != missing})
    assert caught.value.problem.startswith(f"{missing} is not set")
    assert "torchrun" in caught.value.hint


def test_world_size_below_one_is_named() -> None:
    with pytest.raises(LaunchEnvironmentError, match="WORLD_SIZE=0 must be at least 1") as caught:
        detect_layout({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "0"})
    assert "WORLD_SIZE" in caught.value.hint


def test_non_integer_variable_is_named() -> None:
    with pytest.raises(LaunchEnvironmentError, match="WORLD_SIZE='eight'"):
        detect_layout({**TORCHRUN, "WORLD_SIZE": "eight"})


def test_local_rank_beyond_local_world_size() -> None:
    with pytest.raises(LaunchEnvironmentError, match=r"LOCAL_RANK=4 is outside 0\.\.3") as caught:
        detect_layout({**TORCHRUN, "LOCAL_RANK": "4"})
    assert "--nproc-per-node" in caught.value.hint


@pytest.mark.parametrize(("port", "valid"), [("0", False), ("1", True), ("65535", True),
                                             ("65536", False)])  # fmt: skip
def test_master_port_must_be_a_tcp_port(port: str, valid: bool) -> None:
    # TCP ports are 1..65535.
    environ = {**TORCHRUN, "MASTER_PORT": port}
    if valid:
        assert detect_layout(environ).master_port == int(port)
        return
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout(environ)
    assert caught.value.problem == f"MASTER_PORT={port} is not a valid TCP port."
    assert "29500" in caught.value.hint


def test_srun_step_gives_layout_from_slurm_variables() -> None:
    layout = detect_layout(SLURM_STEP)
    assert layout.launcher == "slurm"
    assert (layout.rank, layout.local_rank, layout.world_size) == (5, 1, 8)
    assert (layout.local_world_size, layout.node_rank, layout.num_nodes) == (4, 1, 2)
    # MASTER_ADDR is the first host of the expanded node list, where rank 0 runs.
    assert layout.master_addr == "nid005000"
    # The documented rule (docs/slurm-jobs.md): 20000 + job id mod 10000, as the job script's
    # shell computes it; tests/launch/test_fake_srun.py checks that the two agree.
    assert layout.master_port == 20000 + 123456 % 10000 == 23456


def test_srun_master_port_differs_between_jobs_and_respects_master_port() -> None:
    other_job = detect_layout({**SLURM_STEP, "SLURM_JOB_ID": "123457"})
    assert other_job.master_port != detect_layout(SLURM_STEP).master_port
    assert 1024 < other_job.master_port < 32768
    assert detect_layout({**SLURM_STEP, "MASTER_PORT": "24500"}).master_port == 24500
    assert detect_layout({**SLURM_STEP, "MASTER_ADDR": "x"}).master_addr == "x"
    # SLURM_JOBID: the job id under its older name, which Slurm keeps for compatibility.
    old_name = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_JOB_ID"}
    assert detect_layout({**old_name, "SLURM_JOBID": "123456"}).master_port == 23456


def test_srun_uneven_tasks_per_node_uses_this_nodes_count() -> None:
    environ = {
        **SLURM_STEP,
        "SLURM_STEP_TASKS_PER_NODE": "3,2",
        "SLURM_STEP_NUM_TASKS": "5",
        "SLURM_NTASKS": "5",
        "SLURM_PROCID": "4",
    }
    assert detect_layout(environ).local_world_size == 2


@pytest.mark.parametrize(("node_id", "tasks_here"), [("0", 3), ("1", 2), ("2", 4)])
def test_srun_uneven_tasks_without_this_host_in_the_list_count_by_slurm_nodeid(
    node_id: str, tasks_here: int
) -> None:
    # Where SLURMD_NODENAME is not one of the step's host names (an alias, a container),
    # SLURM_NODEID ("the relative node ID of the current node", counted from 0) picks this
    # node's entry of SLURM_STEP_TASKS_PER_NODE ("3,2,4": 3 tasks on the first node, ...).
    environ = {
        **SLURM_STEP,
        "SLURM_STEP_NODELIST": "nid[005000-005002]",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_STEP_TASKS_PER_NODE": "3,2,4",
        "SLURM_STEP_NUM_TASKS": "9",
        "SLURM_NTASKS": "9",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": node_id,
        "SLURMD_NODENAME": "localhost",
    }
    layout = detect_layout(environ)
    assert (layout.node_rank, layout.local_world_size) == (int(node_id), tasks_here)


def test_srun_host_name_in_the_list_wins_over_a_stale_nodeid() -> None:
    # The step's own list decides: SLURM_NODEID counts within the job, not the step.
    environ = {**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "4,3", "SLURM_NODEID": "0"}
    environ |= {"SLURM_STEP_NUM_TASKS": "7", "SLURM_NTASKS": "7", "SLURM_PROCID": "5"}
    assert detect_layout(environ).local_world_size == 3  # SLURMD_NODENAME is the 2nd host


def test_srun_without_step_nodelist_falls_back_to_job_nodelist() -> None:
    environ = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_STEP_NODELIST"}
    environ["SLURM_JOB_NODELIST"] = "gpu[12,15-16]"
    assert detect_layout(environ).master_addr == "gpu12"


def test_srun_master_is_the_first_node_of_the_step_not_of_the_job() -> None:
    # `srun --relative=2 --nodes=2` in a job on n[1-4]: the step's rank 0 runs on n3.
    environ = {**SLURM_STEP, "SLURM_JOB_NODELIST": "n[1-4]", "SLURM_STEP_NODELIST": "n[3-4]",
               "SLURMD_NODENAME": "n4", "SLURM_NODEID": "3"}  # fmt: skip
    layout = detect_layout(environ)
    assert (layout.master_addr, layout.node_rank, layout.num_nodes) == ("n3", 1, 2)


def test_bad_nodelist_is_reported() -> None:
    with pytest.raises(LaunchEnvironmentError, match="Slurm node list"):
        detect_layout({**SLURM_STEP, "SLURM_STEP_NODELIST": "nid[005000-"})


@pytest.mark.parametrize("tasks", ["2", "4"])
def test_python_in_batch_script_of_multi_task_job_says_use_srun(tasks: str) -> None:
    batch_step = {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": tasks}
    with pytest.raises(LaunchEnvironmentError, match="batch script") as caught:
        detect_layout(batch_step)
    assert "srun" in caught.value.hint


def test_single_task_batch_job_is_a_single_process() -> None:
    layout = detect_layout({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert layout.launcher == "single" and layout.world_size == 1


def test_open_mpi_variables() -> None:
    environ = {
        "OMPI_COMM_WORLD_RANK": "6",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "MASTER_ADDR": "node1",
    }
    layout = detect_layout(environ)
    assert layout.launcher == "mpi"
    assert (layout.rank, layout.local_rank, layout.node_rank, layout.num_nodes) == (6, 2, 1, 2)


def test_mpirun_inside_a_job_ignores_the_inherited_batch_procid() -> None:
    # mpirun in a batch script: every rank inherits SLURM_PROCID=0 from the batch step.
    environ = {
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    layout = detect_layout(environ)
    assert layout.launcher == "mpi" and layout.rank == 3
    assert layout.master_addr == "n1" and layout.master_port == 20077


def test_hydra_pmi_variables_on_one_node_need_no_master_addr() -> None:
    environ = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    layout = detect_layout(environ)
    assert layout.launcher == "mpi" and layout.master_addr == "127.0.0.1"


def test_hydra_across_nodes_without_master_addr_is_an_error() -> None:
    environ = {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR"):
        detect_layout(environ)


def test_pmix_under_srun_takes_sizes_from_slurm() -> None:
    environ = {**SLURM_STEP, "PMIX_RANK": "5"}
    layout = detect_layout(environ)
    assert layout.launcher == "mpi"
    assert (layout.rank, layout.world_size, layout.local_rank) == (5, 8, 1)
    assert layout.master_addr == "nid005000"


def test_pmix_without_any_size_says_what_is_missing() -> None:
    with pytest.raises(LaunchEnvironmentError, match="world size is not") as caught:
        detect_layout({"PMIX_RANK": "0"})
    assert "mpirun/srun" in caught.value.hint


@pytest.mark.parametrize(
    "environ",
    [
        {"PMI_RANK": "0", "PMI_SIZE": "2"},
        # A local rank without the local size (the batch step's SLURM_LOCALID, inherited).
        {"PMI_RANK": "0", "PMI_SIZE": "2", "SLURM_LOCALID": "0"},
    ],
)
def test_mpi_without_local_rank_and_size_is_an_error(environ: dict[str, str]) -> None:
    with pytest.raises(LaunchEnvironmentError, match="which process runs where") as caught:
        detect_layout(environ)
    assert "mpirun" in caught.value.hint


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        (
            {"OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_SIZE": "8",
             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
            "OMPI_COMM_WORLD_RANK=8 is outside 0..7 (OMPI_COMM_WORLD_SIZE=8)",
        ),
        (
            {"PMI_RANK": "4", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "4"},
            "PMI_RANK=4 is outside 0..3 (PMI_SIZE=4)",
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
             "OMPI_COMM_WORLD_LOCAL_RANK": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
            "OMPI_COMM_WORLD_LOCAL_RANK=4 is outside 0..3",
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "0",
             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
            "OMPI_COMM_WORLD_SIZE=0 must be at least 1",
        ),
    ],
)  # fmt: skip
def test_mpi_errors_name_the_variables_this_mpi_set(environ: dict[str, str], problem: str) -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout(environ)
    assert caught.value.problem.startswith(problem)


def test_mpirun_without_slurm_places_ranks_in_blocks_of_the_local_size() -> None:
    # mpirun -np 6 over two hosts of 4 slots: 4 ranks on the first, 2 on the second.
    environ = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "6",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
               "MASTER_ADDR": "h1"}  # fmt: skip
    layout = detect_layout(environ)
    assert (layout.node_rank, layout.num_nodes) == (0, 2)


def test_plain_python_is_a_single_process() -> None:
    layout = detect_layout({"HOME": "/root"})
    assert layout.launcher == "single"
    assert (layout.rank, layout.world_size, layout.local_world_size) == (0, 1, 1)


# --- Launcher corners of real clusters (issue 11) ---------------------------------------------

# Task 4 of `srun --nodes=4 --ntasks=7 --distribution=cyclic` with SLURM_TASKS_PER_NODE=2(x3),1:
# ranks go round the nodes (0->n1, 1->n2, 2->n3, 3->n4, 4->n1, ...), so rank // tasks per node
# is not the node; Slurm says which node and local rank each task has.
CYCLIC_UNEVEN = {
    "SLURM_JOB_ID": "900",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "7",
    "SLURM_STEP_NUM_TASKS": "7",
    "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_NODELIST": "n[1-4]",
    "SLURM_JOB_NODELIST": "n[1-4]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
    "SLURMD_NODENAME": "n1",
}


@pytest.mark.parametrize("rank_variable", ["PMIX_RANK", "PMI_RANK"])
def test_pmix_and_pmi2_ranks_under_srun_keep_slurms_nodes_for_cyclic_uneven(
    rank_variable: str,
) -> None:
    environ = {**CYCLIC_UNEVEN, rank_variable: "4", "PMI_SIZE": "7"}
    layout = detect_layout(environ)
    assert layout.launcher == "mpi"
    # Not node 4 // 2 = 2: Slurm put rank 4 on the first node, as its second task there.
    assert (layout.rank, layout.node_rank, layout.local_rank) == (4, 0, 1)
    assert (layout.local_world_size, layout.num_nodes, layout.world_size) == (2, 4, 7)
    last_node = {**environ, "SLURM_NODEID": "3", "SLURMD_NODENAME": "n4", "SLURM_LOCALID": "0",
                 "SLURM_PROCID": "3", rank_variable: "3"}  # fmt: skip
    assert detect_layout(last_node).local_world_size == 1


def test_srun_cyclic_uneven_without_mpi() -> None:
    layout = detect_layout(CYCLIC_UNEVEN)
    assert layout.launcher == "slurm"
    assert (layout.node_rank, layout.local_world_size, layout.num_nodes) == (0, 2, 4)


def test_tasks_per_node_from_ntasks_per_node_when_no_list_is_set() -> None:
    environ = {**SLURM_STEP, "SLURM_NTASKS_PER_NODE": "4"}
    environ.pop("SLURM_STEP_TASKS_PER_NODE")
    environ.pop("SLURM_STEP_NUM_NODES")
    environ.pop("SLURM_STEP_NODELIST")
    layout = detect_layout(environ)
    assert (layout.local_world_size, layout.num_nodes, layout.node_rank) == (4, 2, 1)


def test_job_tasks_per_node_used_only_when_it_fits_the_step() -> None:
    # A 1-task step (srun -n1) inside a job of 2 × 4 tasks: the job's list is not this step's.
    environ = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1",
               "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
               "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "nid005000",
               "SLURM_TASKS_PER_NODE": "4(x2)"}  # fmt: skip
    environ.pop("SLURM_STEP_TASKS_PER_NODE")
    layout = detect_layout(environ)
    assert (layout.world_size, layout.local_world_size, layout.num_nodes) == (1, 1, 1)
    # A step of `srun --nodes=2 --ntasks=2` in that job: as many nodes as the job's list, but
    # not as many tasks, so neither that list nor the inherited SLURM_NTASKS_PER_NODE=4 is its.
    spread = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2",
              "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
              "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NTASKS_PER_NODE": "4"}  # fmt: skip
    spread.pop("SLURM_STEP_TASKS_PER_NODE")
    assert detect_layout(spread).local_world_size == 1
    # A step that fills a job of `sbatch --ntasks=5 --nodes=2` (SLURM_TASKS_PER_NODE=3,2) and
    # gives no list of its own: the job's list is the step's, 2 tasks on the second node.
    fills = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "5", "SLURM_NTASKS": "5",
             "SLURM_PROCID": "4", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "3,2"}  # fmt: skip
    fills.pop("SLURM_STEP_TASKS_PER_NODE")
    assert detect_layout(fills).local_world_size == 2


def test_without_any_task_count_list_the_first_node_has_the_most_tasks() -> None:
    # 7 tasks on 2 nodes and no list: Slurm's default block distribution puts 4 on the first.
    environ = {**SLURM_STEP, "SLURM_STEP_NUM_TASKS": "7", "SLURM_NTASKS": "7",
               "SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NODEID": "0",
               "SLURMD_NODENAME": "nid005000"}  # fmt: skip
    environ.pop("SLURM_STEP_TASKS_PER_NODE")
    layout = detect_layout(environ)
    assert (layout.local_rank, layout.local_world_size) == (3, 4)


@pytest.mark.parametrize(("per_node", "tasks"), [("4(x2)", 8), ("2(x2)", 4)])
def test_missing_localid_with_several_tasks_on_the_node_is_an_error(
    per_node: str, tasks: int
) -> None:
    environ = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_LOCALID"}
    environ |= {"SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_STEP_NUM_TASKS": str(tasks),
                "SLURM_NTASKS": str(tasks), "SLURM_PROCID": str(tasks - 1)}  # fmt: skip
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout(environ)
    assert f"SLURM_LOCALID is not set, but {tasks // 2} tasks" in caught.value.problem
    assert "SLURM_LOCALID" in caught.value.hint and "LOCAL_RANK" in caught.value.hint


def test_missing_localid_with_one_task_on_the_node_is_local_rank_zero() -> None:
    environ = {**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "7,1", "SLURM_NODEID": "1",
               "SLURM_PROCID": "7"}  # fmt: skip
    environ.pop("SLURM_LOCALID")
    layout = detect_layout(environ)
    assert (layout.local_rank, layout.local_world_size) == (0, 1)


def test_nodeid_beyond_the_node_count_is_an_error() -> None:
    # Read where this host's name is not in the step's list (the list decides otherwise).
    environ = {**SLURM_STEP, "SLURM_NODEID": "2", "SLURMD_NODENAME": "localhost"}
    with pytest.raises(LaunchEnvironmentError, match=r"SLURM_NODEID=2 is outside 0\.\.1"):
        detect_layout(environ)


def test_srun_step_without_its_task_count_or_this_nodes_place_is_an_error() -> None:
    no_count = {k: v for k, v in SLURM_STEP.items() if "NTASKS" not in k and "NUM_TASKS" not in k}
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout(no_count)
    assert "SLURM_NTASKS is not set" in caught.value.problem
    assert "--ntasks-per-node" in caught.value.hint
    # This host's name is not in the step's list of 2 nodes (an alias) and SLURM_NODEID,
    # "the relative node ID of the current node", is not set: no way to know which node this is.
    placeless = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_NODEID"}
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout({**placeless, "SLURMD_NODENAME": "localhost"})
    assert "SLURM_NODEID is not set" in caught.value.problem
    assert "localhost" in caught.value.problem and "2 nodes" in caught.value.problem
    assert "srun" in caught.value.hint and "SLURM_NODEID" in caught.value.hint


def test_srun_step_that_says_less_about_its_nodes() -> None:
    # No node list: SLURM_NNODES ("total number of nodes in the job's resource allocation")
    # gives the count, SLURM_NODEID this node's place.
    without_list = {k: v for k, v in SLURM_STEP.items() if "NODELIST" not in k}
    without_list.pop("SLURM_STEP_NUM_NODES")
    layout = detect_layout({**without_list, "SLURM_NNODES": "2", "MASTER_ADDR": "nid005000"})
    assert (layout.num_nodes, layout.node_rank, layout.local_world_size) == (2, 1, 4)
    # A trimmed environment (a container passing on only a task's own variables): nothing
    # names a second node, so there is one, and this is it.
    trimmed = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
               "SLURM_NTASKS": "2", "MASTER_ADDR": "localhost"}  # fmt: skip
    layout = detect_layout(trimmed)
    assert (layout.num_nodes, layout.node_rank, layout.local_world_size) == (1, 0, 2)
    # A single task there has no rank 0 to find: no MASTER_ADDR needed.
    alone = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert (detect_layout(alone).launcher, detect_layout(alone).world_size) == ("slurm", 1)
    # One node listed, under another name than this host's, and no SLURM_NODEID: that node.
    aliased = {k: v for k, v in trimmed.items() if k != "MASTER_ADDR"}
    layout = detect_layout({**aliased, "SLURM_STEP_NODELIST": "n1", "SLURMD_NODENAME": "localhost"})
    assert (layout.num_nodes, layout.node_rank, layout.master_addr) == (1, 0, "n1")


@pytest.mark.parametrize("bad", ["4(x2", "four", "4(x0)", "0,4", "4(y2)", ""])
def test_malformed_task_count_list_is_scaletrains_error(bad: str) -> None:
    environ = {**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": bad or ","}
    with pytest.raises(LaunchEnvironmentError, match="SLURM_STEP_TASKS_PER_NODE=") as caught:
        detect_layout(environ)
    assert "not a Slurm task count list" in caught.value.problem


def test_task_count_list_contradicting_the_step_is_an_error() -> None:
    with pytest.raises(LaunchEnvironmentError, match=r"means 6 task\(s\) on 2 node"):
        detect_layout({**SLURM_STEP, "SLURM_STEP_TASKS_PER_NODE": "3(x2)"})


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


# mpirun in a batch script on n[1-2], 2 ranks per node: Open MPI starts its daemon on n2 with
# srun, so ranks there see a step of their own (node list n2, SLURM_PROCID 0); ranks on n1 see
# the batch step. Both must agree that rank 0 (on mpirun's node, n1) is the master.
MPIRUN_IN_BATCH = {
    "SLURM_JOB_ID": "902",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NTASKS": "4",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}


def test_mpirun_in_a_batch_job_agrees_on_the_master_on_every_node() -> None:
    on_first = {**MPIRUN_IN_BATCH, "SLURMD_NODENAME": "n1", "SLURM_PROCID": "0",
                "SLURM_NODEID": "0", "OMPI_COMM_WORLD_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1"}  # fmt: skip
    on_second = {**MPIRUN_IN_BATCH, "SLURMD_NODENAME": "n2", "SLURM_STEP_ID": "0",
                 "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "n2",
                 "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1",
                 "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}  # fmt: skip
    first, second = detect_layout(on_first), detect_layout(on_second)
    assert (first.master_addr, second.master_addr) == ("n1", "n1")
    assert (first.node_rank, second.node_rank) == (0, 1)
    assert (first.num_nodes, second.num_nodes) == (2, 2)
    assert (second.rank, second.local_rank, second.world_size) == (2, 0, 4)
    # An exported MASTER_ADDR wins over the job's first node.
    assert detect_layout({**on_second, "MASTER_ADDR": "n2"}).master_addr == "n2"


def test_mpirun_in_a_batch_job_places_ranks_where_slurm_says_this_host_is() -> None:
    # `mpirun --map-by node`: ranks go round the nodes, so rank 1 is on n2 (rank 1 // 2 = 0
    # would be the first node); this host's place in the job's node list says which node.
    round_robin = {**MPIRUN_IN_BATCH, "SLURMD_NODENAME": "n2", "SLURM_STEP_ID": "0",
                   "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "n2",
                   "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}  # fmt: skip
    assert detect_layout(round_robin).node_rank == 1
    # `mpirun -np 2` in that 2-node job fills the first node's slots: one node, not two.
    one_node = {**MPIRUN_IN_BATCH, "SLURMD_NODENAME": "n1", "SLURM_PROCID": "0",
                "SLURM_NODEID": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1"}  # fmt: skip
    layout = detect_layout(one_node)
    assert (layout.node_rank, layout.num_nodes, layout.local_world_size) == (0, 1, 2)
