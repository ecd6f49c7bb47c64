"""`scaletrain scale --cluster`: one Slurm job per node count, one after another (jobs of
a study must not share the machine), with the billing shown, and bounded, first."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scaletrain.cli.common import process_environ
from scaletrain.cli.request_options import submitting_venv
from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import JobOptions
from scaletrain.launch.prepare import PreparedJob, prepare_job
from scaletrain.launch.submission import submit_job
from scaletrain.launch.template_cache import template_cache_folder
from scaletrain.observe.monitor.sampler import DEFAULT_INTERVAL_S
from scaletrain.observe.scaling.study import Point, StudyDesign, measure
from scaletrain.planning.plan import Plan
from scaletrain.planning.request import Request
from scaletrain.planning.software import SoftwareChoice
from scaletrain.slurm import commands as slurm

_POLL_S = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmStudy:
    cluster: str
    time: str
    gpus_per_node: int | None
    partition: str | None
    account: str | None
    mode: str
    budget: float | None
    preflight: bool


def _sizes_folder(folder: RunFolder, size: int) -> RunFolder:
    return RunFolder(folder.root / "sizes" / f"n{size}")


def _prepared(
    study: SlurmStudy,
    folder: RunFolder,
    script: Path,
    args: Sequence[str],
    design: StudyDesign,
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
                script_args=design.script_args(args, size),
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
            run_folder=_sizes_folder(folder, size),
            options=options,
        )
        for size in design.sizes
    }


def _show_billing(plans: dict[int, Plan], budget: float | None) -> None:
    """Each job's cost for its whole time limit (the most it can bill), and the total."""
    rows = []
    total, unit = 0.0, ""
    for size, plan in plans.items():
        billing = plan.billing
        cost = "-" if billing is None else f"{billing.total_units:.4g} {billing.unit}"
        if billing is not None:
            total += billing.total_units
            unit = billing.unit
        limit = format_slurm_time(plan.time_seconds)
        rows.append((str(size), str(plan.world_size), plan.partition, limit, cost))
    rows.append(("all", "", "", "", f"at most {total:.4g} {unit}"))
    columns = ("nodes", "processes", "partition", "time limit", "billing")
    console.show(console.table(rows, title="what the study may bill", columns=columns))
    console.info("  jobs run one after another and end after the study's steps, usually well "
                 "before their time limit")  # fmt: skip
    if budget is not None and total > budget:
        raise ScaletrainError(
            f"The study may bill {total:.4g} {unit}, more than --budget {budget:g}.",
            "use fewer or smaller --sizes, a shorter --time per job, or a larger --budget.",
        )


def _wait(job_id: str, size: int, environ: dict[str, str]) -> str:
    while True:
        info = slurm.job_info(job_id, environ=environ)
        if info is None or not info.is_active:
            return info.state if info else "UNKNOWN"
        time.sleep(_POLL_S)


def run_on_slurm(
    study: SlurmStudy,
    folder: RunFolder,
    script: Path,
    args: Sequence[str],
    design: StudyDesign,
    *,
    dry_run: bool,
) -> tuple[list[Point], int] | None:
    """Plan, show the billing, then submit and wait for each size; the points and the
    processes per node (None for --dry-run)."""
    environ = process_environ()
    options = JobOptions(
        workdir=Path.cwd(),
        requeue=False,
        max_restarts=0,
        preflight=study.preflight,
        monitor_interval_s=DEFAULT_INTERVAL_S,
        instrument=tuple(design.variables().items()),
        template_cache=template_cache_folder(environ),
    )
    prepared = _prepared(study, folder, script, args, design, options, environ)
    plans = {size: job.plan for size, job in prepared.items()}
    _show_billing(plans, study.budget)
    if dry_run:
        return None
    points = []
    for size, job in prepared.items():
        run = _sizes_folder(folder, size)
        job_id = submit_job(job, run, environ)
        console.info(f"  {size} node(s): job {job_id}, run folder {run.root}/")
        state = _wait(job_id, size, environ)
        if state != "COMPLETED":
            raise ScaletrainError(
                f"The job with {size} node(s) ended {state}.",
                f"see {run.logs}/ (scaletrain logs {folder.name}/sizes/n{size}); the study "
                "stops at the first failed size.",
            )
        points.append(measure(run, size, design))
    return points, next(iter(plans.values())).gpus_per_node
