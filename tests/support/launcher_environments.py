"""Launcher environments as a real cluster sets them, shared by the launcher tests
(tests/runtime/test_launchers*.py)."""

from __future__ import annotations

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
