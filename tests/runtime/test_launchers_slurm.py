"""Launcher detection under srun: the step's layout from Slurm's variables, uneven and cyclic
task counts, node lists, and the errors of a step that says too little."""

from __future__ import annotations

import pytest

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout
from tests.support.launcher_environments import CYCLIC_UNEVEN, SLURM_STEP


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
