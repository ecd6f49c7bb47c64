"""The jobs of a scaling study on Slurm (`scaletrain scale --cluster`): one per node count,
each checked as `submit` checks one and billed before any is submitted, then run one after
another (jobs of a study must not share the machine)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import JobOptions
from scaletrain.launch.prepare import PreparedJob, prepare_job
from scaletrain.launch.submission import submit_job
from scaletrain.launch.template_cache import template_cache_folder
from scaletrain.planning.plan import Plan
from scaletrain.planning.request import Request
from scaletrain.planning.software import SoftwareChoice, submitting_venv
from scaletrain.slurm import commands as slurm

# Seconds between looks at a running job of the study.
_POLL_S = 2.0
# Columns of `billing_rows`.
BILLING_COLUMNS = ("nodes", "processes", "partition", "time limit", "billing")


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmStudy:
    """What every job of the study asks for; the sizes are node counts."""

    cluster: str
    time: str
    """Each job's time limit."""
    gpus_per_node: int | None
    partition: str | None
    account: str | None
    mode: str
    budget: float | None
    """The most the study may bill; None: no bound."""
    preflight: bool


def size_folder(folder: RunFolder, size: int) -> RunFolder:
    """The run folder of one size's job inside the study's folder."""
    return RunFolder(folder.root / "sizes" / f"n{size}")


def study_job_options(
    *,
    preflight: bool,
    monitor_interval_s: float,
    instrument: Mapping[str, str],
    environ: Mapping[str, str],
) -> JobOptions:
    """Each job trains for the study's steps and ends: no requeue, no restarts."""
    return JobOptions(
        workdir=Path.cwd(),
        requeue=False,
        max_restarts=0,
        preflight=preflight,
        monitor_interval_s=monitor_interval_s,
        instrument=tuple(instrument.items()),
        template_cache=template_cache_folder(environ),
    )


def prepare_study_jobs(
    study: SlurmStudy,
    folder: RunFolder,
    script: Path,
    args_by_size: Mapping[int, Sequence[str]],
    options: JobOptions,
    environ: dict[str, str],
) -> dict[int, PreparedJob]:
    """Each size's job, checked as `scaletrain submit` checks one (launch/prepare.py)."""
    profile = load_profile(study.cluster, environ)
    return {
        size: prepare_job(
            Request(
                cluster=study.cluster,
                script=str(script),
                script_args=tuple(args),
                time=study.time,
                nodes=size,
                gpus_per_node=study.gpus_per_node or profile.node.gpus,
                partition=study.partition,
                mode=study.mode,
                account=study.account,
                # The job runs from the venv this command runs from, as `submit` does.
                software=SoftwareChoice(submitting_venv=submitting_venv(environ)),
            ),
            profile,
            run_folder=size_folder(folder, size),
            options=options,
        )
        for size, args in args_by_size.items()
    }


def billing_rows(plans: Mapping[int, Plan]) -> list[tuple[str, ...]]:
    """Each job's cost for its whole time limit (the most it can bill), and the total."""
    rows: list[tuple[str, ...]] = []
    for size, plan in plans.items():
        billing = plan.billing
        cost = "-" if billing is None else f"{billing.total_units:.4g} {billing.unit}"
        limit = format_slurm_time(plan.time_seconds)
        rows.append((str(size), str(plan.world_size), plan.partition, limit, cost))
    total, unit = _total(plans)
    rows.append(("all", "", "", "", f"at most {total:.4g} {unit}"))
    return rows


def check_budget(plans: Mapping[int, Plan], budget: float | None) -> None:
    """A study that may bill more than its --budget is an error."""
    total, unit = _total(plans)
    if budget is not None and total > budget:
        raise ScaletrainError(
            f"The study may bill {total:.4g} {unit}, more than --budget {budget:g}.",
            "use fewer or smaller --sizes, a shorter --time per job, or a larger --budget.",
        )


def _total(plans: Mapping[int, Plan]) -> tuple[float, str]:
    """What all the jobs may bill together, and the unit."""
    billed = [plan.billing for plan in plans.values() if plan.billing is not None]
    return sum(billing.total_units for billing in billed), billed[-1].unit if billed else ""


def run_one_after_another(
    prepared: Mapping[int, PreparedJob], folder: RunFolder, environ: dict[str, str]
) -> list[RunFolder]:
    """Submit each size's job once the one before has completed; their run folders. A job
    that did not complete ends the study."""
    runs = []
    for size, job in prepared.items():
        run = size_folder(folder, size)
        job_id = submit_job(job, run, environ)
        console.info(f"  {size} node(s): job {job_id}, run folder {run.root}/")
        state = _wait(job_id, environ)
        if state != "COMPLETED":
            raise ScaletrainError(
                f"The job with {size} node(s) ended {state}.",
                f"see {run.logs}/ (scaletrain logs {folder.name}/sizes/n{size}); the study "
                "stops at the first failed size.",
            )
        runs.append(run)
    return runs


def _wait(job_id: str, environ: dict[str, str]) -> str:
    """The job's final state, once Slurm has ended it."""
    while True:
        info = slurm.job_info(job_id, environ=environ)
        if info is None or not info.is_active:
            return info.state if info else "UNKNOWN"
        time.sleep(_POLL_S)
