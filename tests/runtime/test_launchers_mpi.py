"""Launcher detection under MPI: Open MPI, Hydra and PMIx variables, with and without Slurm,
and mpirun in a batch job."""

from __future__ import annotations

import pytest

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout
from tests.support.launcher_environments import CYCLIC_UNEVEN, SLURM_STEP


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
