"""A job and its rehearsal (`scaletrain submit --rehearse`): the rehearsal on the profile's
debug partition first, the real job queued at once behind it.

Both scripts are rendered by the same code as any job, from the same request; the rehearsal
has its own run folder inside the run's (runs/<name>/rehearsal/), so that its checkpoints never
seed the real run. The real job keeps its place in the queue with `--dependency=afterok`, and
`--kill-on-invalid-dep=yes` has Slurm cancel it when the rehearsal fails (Slurm 22.05: state
CANCELLED, reason DependencyNeverSatisfied), whatever the site's default.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import JobOptions, stop_margin
from scaletrain.launch.prepare import PreparedJob, prepare_job
from scaletrain.launch.submission import check_no_live_job, submit_job
from scaletrain.planning.rehearsal import rehearsal_request
from scaletrain.planning.request import Request
from scaletrain.slurm import commands as slurm

DEFAULT_REHEARSAL_STEPS = 10
"""Steps before a rehearsal's save and resume, and again after it (--rehearsal-steps)."""
_CHECKPOINTER = "st.Checkpointer"


@dataclass(frozen=True, slots=True)
class PreparedRehearsal:
    job: PreparedJob
    folder: RunFolder
    notes: tuple[str, ...]
    """What differs from the real job beyond partition and time, and why."""
    steps: int | None
    """Steps before the save and resume and after it; None: no st.Checkpointer to rehearse."""
    end_s: int
    """Training ends this long after the job started, at the latest."""

    def describe(self) -> str:
        """What the rehearsal does, in one line for `submit`."""
        plan = self.job.plan
        limit = format_slurm_time(plan.time_seconds)
        cost = f", at most {plan.billing.total_units:g} {plan.billing.unit}" if plan.billing else ""
        where = (
            f"{plan.nodes} node(s) × {plan.gpus_per_node} on {plan.partition} first ({limit}{cost})"
        )
        end = format_slurm_time(self.end_s)
        if self.steps:
            what = (
                f"{self.steps} steps, a checkpoint saved and resumed, {self.steps} more "
                f"(st.Checkpointer), or training until {end}"
            )
        else:
            what = f"training until {end} without an error (no st.Checkpointer to rehearse)"
        return f"{where}: {what}; the real job starts only if it passes"


def prepare_rehearsal(
    request: Request,
    profile: ClusterProfile,
    real: PreparedJob,
    folder: RunFolder,
    options: JobOptions,
    *,
    steps: int = DEFAULT_REHEARSAL_STEPS,
    time: str | None = None,
) -> PreparedRehearsal:
    """The rehearsal of the job `real` (prepared with `options`) of run `folder`, checked as
    any job is."""
    planned = rehearsal_request(request, real.plan, profile, time=time)
    name = f"{real.plan.job_name or folder.name}-rehearsal"
    options = dataclasses.replace(
        options, requeue=False, max_restarts=0, stop_margin_s=None, rehearsal_steps=steps
    )
    job = prepare_job(
        dataclasses.replace(planned.request, job_name=name),
        profile,
        run_folder=folder.rehearsal,
        options=options,
    )
    rehearsed_steps = steps if _CHECKPOINTER in job.script_facts.resumes else None
    end_s = job.plan.time_seconds - stop_margin(job.plan, options)
    return PreparedRehearsal(job, folder.rehearsal, planned.notes, rehearsed_steps, end_s)


def submit_with_rehearsal(
    real: PreparedJob, folder: RunFolder, rehearsal: PreparedRehearsal, environ: Mapping[str, str]
) -> tuple[str, str]:
    """Submit the rehearsal in a fresh folder, then the real job behind it: their job ids.
    When the real job cannot be submitted, the rehearsal is cancelled: nothing is left half."""
    check_no_live_job(rehearsal.folder, environ)
    if rehearsal.folder.root.exists():
        shutil.rmtree(rehearsal.folder.root)  # the last rehearsal's checkpoints must not resume
    rehearsal_id = submit_job(rehearsal.job, rehearsal.folder, environ)
    try:
        job_id = submit_job(real, folder, environ, after_rehearsal=rehearsal_id)
    except BaseException:
        slurm.cancel(rehearsal_id, environ=environ)
        raise
    return rehearsal_id, job_id
