"""Fuzz: any mixture of launcher variables (torchrun, Slurm, MPI) with any values. Reading the
layout gives a consistent layout or a LaunchEnvironmentError that names the variable; never
another exception, which would reach the user as a traceback from st.init()."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.layout import cpus_per_process
from tests.support.fuzz import FUZZ

VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES",
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
    "SLURMD_NODENAME", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", "PMIX_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
)  # fmt: skip

# Values launchers write (numbers, host lists, Slurm's counts per node) and values they never
# write (negative, huge, text, empty).
values = st.one_of(
    st.integers(min_value=-3, max_value=9).map(str),
    st.sampled_from(["", " 1", "1.0", "x", "99999999999999999999", "-0", "٣", "1_0",
                     "n[1-4]", "n1,n2", "n[01-02],m7", "n[", "2(x3)", "4,2(x2)", "(x2)",
                     "65536", "0", "localhost", "::1"]),
    st.text(max_size=8),
)  # fmt: skip
environments = st.dictionaries(st.sampled_from(VARIABLES), values, max_size=12)


@FUZZ
@given(environ=environments)
def test_any_launcher_environment_gives_a_layout_or_names_the_variable(
    environ: dict[str, str],
) -> None:
    try:
        layout = detect_layout(environ)
    except LaunchEnvironmentError as error:
        assert error.problem and error.hint and "\n" not in error.problem
        return
    assert 0 <= layout.rank < layout.world_size
    assert 0 <= layout.local_rank < layout.local_world_size
    assert 0 < layout.master_port < 65536
    assert cpus_per_process(layout, environ, allowed=8) >= 1
