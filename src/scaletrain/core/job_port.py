"""The rendezvous port of a Slurm job, derived from its job id.

Generated job scripts compute it in shell (launch/) and the runtime in Python when srun
started the tasks without MASTER_PORT (runtime/launchers/slurm_step.py): both from these
numbers, so that every rank of a job agrees and two jobs sharing a node do not collide.
"""

from __future__ import annotations

# Ports below Linux's ephemeral range (32768+), so that a derived port is rarely taken.
JOB_PORT_BASE = 20000
JOB_PORT_SPAN = 10000


def port_for_job(job_id: int) -> int:
    """The port of job `job_id`: JOB_PORT_BASE + job_id % JOB_PORT_SPAN."""
    return JOB_PORT_BASE + job_id % JOB_PORT_SPAN
