"""`scaletrain submit`: plan, write the job script into the run folder, and sbatch it."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import typer

from scaletrain.cli.common import (
    HANG_LIMIT_OPTION,
    JSON_OPTION,
    MONITOR_INTERVAL_OPTION,
    PROFILE_OPTION,
    RUN_NAME_OPTION,
    RUNS_DIR_OPTION,
    process_environ,
)
from scaletrain.cli.failure_cost import failure_cost
from scaletrain.cli.request_options import request_options
from scaletrain.clusters.catalog import load_profile
from scaletrain.core import console
from scaletrain.core.hang_report import parse_hang_limit
from scaletrain.core.run_folder import RunFolder, default_run_name
from scaletrain.core.variables import PROFILE
from scaletrain.launch.job_script import JobOptions
from scaletrain.launch.prepare import PreparedJob, prepare_job
from scaletrain.launch.rehearsal import (
    DEFAULT_REHEARSAL_STEPS,
    PreparedRehearsal,
    prepare_rehearsal,
    submit_with_rehearsal,
)
from scaletrain.launch.script_decisions import describe_decisions
from scaletrain.launch.shell_text import check_job_name
from scaletrain.launch.submission import check_continuation, submit_job
from scaletrain.launch.template_cache import template_cache_folder
from scaletrain.observe.profile.spec import parse_profile
from scaletrain.planning.request import Request


@request_options
def submit(
    ctx: typer.Context,
    request: Request,
    name: str | None = RUN_NAME_OPTION,
    runs_dir: Path = RUNS_DIR_OPTION,
    requeue: bool | None = typer.Option(
        None,
        "--requeue/--no-requeue",
        help="Requeue after a stop at a checkpoint (time limit near) or a hang. Default: when "
        "the script resumes (st.Checkpointer, or another resume scaletrain can see).",
    ),
    max_requeues: int = typer.Option(3, "--max-requeues", help="Requeue at most this often."),
    stop_margin: int | None = typer.Option(
        None,
        "--stop-margin",
        help="Seconds before the time limit to checkpoint and stop. Default: 300 (a fifth "
        "of time limits under 25 minutes).",
    ),
    max_restarts: int | None = typer.Option(
        None,
        "--max-restarts",
        help="torchrun/accelerate: restart all processes up to this often if one fails. "
        "Default: 3 when the script resumes, else 0.",
    ),
    no_check: bool = typer.Option(
        False,
        "--no-check",
        help="Skip the checks before training: the preflight on every rank and the check of "
        "your script's imports.",
    ),
    hang_limit: str = HANG_LIMIT_OPTION,
    rehearse: bool = typer.Option(
        False,
        "--rehearse",
        help="First a short rehearsal on the cluster's debug partition (same software, "
        "preflight, a few steps, a save and a resume); the job starts only if it passes.",
    ),
    rehearsal_steps: int = typer.Option(
        DEFAULT_REHEARSAL_STEPS,
        "--rehearsal-steps",
        help="With --rehearse: steps before the save and resume, and again after it "
        "(scripts with st.Checkpointer).",
    ),
    rehearsal_time: str | None = typer.Option(
        None,
        "--rehearsal-time",
        help="With --rehearse: the rehearsal's time limit. Default: 15 minutes, or the "
        "partition's limit if shorter.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the job script on stdout; write and submit nothing."
    ),
    monitor_interval: float = MONITOR_INTERVAL_OPTION,
    profile: str | None = PROFILE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Submit SCRIPT as a Slurm job: plan it, write runs/<name>/job.sbatch, sbatch it.

    The job checks every rank first, trains, and before the time limit saves a checkpoint
    and requeues itself; when training hangs it requeues itself without the nodes at fault.
    Follow it with [bold]scaletrain logs -f NAME[/bold]. Prints the job id on stdout.

    Example: [bold]scaletrain submit -c lumi --gpus 16 -t 2:00:00 --name mnist train.py[/bold]
    """
    environ = process_environ()
    run_name = check_job_name(name, "run name") if name else None
    folder = RunFolder(runs_dir / (run_name or default_run_name(request.script, datetime.now())))
    options = JobOptions(
        workdir=Path.cwd(),
        requeue=requeue,
        max_requeues=max_requeues,
        stop_margin_s=stop_margin,
        max_restarts=max_restarts,
        preflight=not no_check,
        monitor_interval_s=monitor_interval or None,
        instrument=((PROFILE, parse_profile(profile).to_text()),) if profile else (),
        hang_limit_s=parse_hang_limit(hang_limit),
        template_cache=template_cache_folder(environ),
    )
    profile_of_cluster = load_profile(request.cluster, environ)
    prepared = prepare_job(request, profile_of_cluster, run_folder=folder, options=options)
    rehearsal = None
    if rehearse:
        rehearsal = prepare_rehearsal(
            request, profile_of_cluster, prepared, folder, options,
            steps=rehearsal_steps, time=rehearsal_time,
        )  # fmt: skip
    for warning in prepared.plan.warnings:
        console.warning(warning)
    _show_decisions(request, prepared, rehearsal, checks_script=not no_check)
    if dry_run:
        if rehearsal is not None:
            console.show_text(rehearsal.job.job_script)
        console.show_text(prepared.job_script)
        return
    check_continuation(folder, prepared.plan, environ)
    if rehearsal is None:
        rehearsal_id, job_id = None, submit_job(prepared, folder, environ)
    else:
        rehearsal_id, job_id = submit_with_rehearsal(prepared, folder, rehearsal, environ)
    if as_json:
        found = {"run": folder.name, "job_id": job_id, "folder": str(folder.root)}
        console.show_json(found | ({"rehearsal_job_id": rehearsal_id} if rehearsal_id else {}))
    else:
        console.show_text(f"{job_id}\n")
    _show_submitted(folder, job_id, runs_dir, rehearsal_id)
    console.info(f"  on failure: {failure_cost(prepared.plan, options.hang_limit_s)}")


def _show_decisions(
    request: Request,
    prepared: PreparedJob,
    rehearsal: PreparedRehearsal | None,
    *,
    checks_script: bool,
) -> None:
    """What the job will do with the script, before it is queued: surprises show here."""
    plan = prepared.plan
    console.info(f"{plan.script} as {plan.nodes} node(s) × {plan.gpus_per_node} on {plan.cluster}:")
    rows = describe_decisions(
        request, plan, prepared.script_facts, prepared.recovery, checks_script=checks_script
    )
    if rehearsal is not None:
        rows.append(("rehearsal", rehearsal.describe()))
        rows += [("", note) for note in rehearsal.notes]
    for what, decided in rows:
        console.info(f"  {what:<13} {decided}")


def _show_submitted(
    folder: RunFolder, job_id: str, runs_dir: Path, rehearsal_id: str | None
) -> None:
    if rehearsal_id is None:
        console.success(f"submitted job {job_id} for run {folder.name}")
    else:
        console.success(
            f"submitted rehearsal {rehearsal_id} and job {job_id} for run {folder.name}: job "
            f"{job_id} starts only after rehearsal {rehearsal_id} passed"
        )
    console.info(f"  folder   {folder.root}/ (plan.toml, job.sbatch, logs/)")
    # The next commands as the user can type them (they find the run under the same folder).
    where = "" if runs_dir == Path("runs") else f" --runs-dir {shlex.quote(str(runs_dir))}"
    for what, command in (("follow", "logs -f"), ("status", "status"), ("cancel", "cancel")):
        console.info(f"  {what:<8} scaletrain {command} {shlex.quote(folder.name)}{where}")
