"""`scaletrain plan`: decide partition, shape, cores, memory and cost before submitting."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer

from scaletrain.cli.common import HANG_LIMIT_OPTION, JSON_OPTION, process_environ
from scaletrain.cli.failure_cost import failure_cost
from scaletrain.cli.request_options import request_options
from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.slurm_time import describe_duration, format_slurm_time
from scaletrain.core import console
from scaletrain.core.hang_report import parse_hang_limit
from scaletrain.core.run_folder import DEFAULT_RUNS_DIR, RunFolder, default_run_name
from scaletrain.launch.job_script import JobOptions, resource_options
from scaletrain.launch.prepare import prepare_job
from scaletrain.launch.template_cache import template_cache_folder
from scaletrain.planning.plan import Plan
from scaletrain.planning.request import Request


@request_options
def plan(
    ctx: typer.Context,
    request: Request,
    as_json: bool = JSON_OPTION,
    hang_limit: str = HANG_LIMIT_OPTION,
) -> None:
    """Plan a Slurm job for SCRIPT: partition, nodes, tasks, cores, memory, cost.

    Writes nothing. Checks what `scaletrain submit` checks, so impossible or wasteful requests
    stop here with what to ask for instead.

    Example: [bold]scaletrain plan --cluster lumi --gpus 16 --time 2:00:00 train.py[/bold]
    """
    # The job script is rendered (and thrown away) so that every value is checked as submit
    # would write it.
    hang_limit_s = parse_hang_limit(hang_limit)
    folder = RunFolder(DEFAULT_RUNS_DIR / default_run_name(request.script, datetime.now()))
    environ = process_environ()
    options = JobOptions(
        workdir=Path.cwd(),
        hang_limit_s=hang_limit_s,
        template_cache=template_cache_folder(environ),
    )
    prepared = prepare_job(
        request, load_profile(request.cluster, environ), run_folder=folder, options=options
    )
    decided = prepared.plan
    if as_json:
        console.show_json(decided.to_dict() | {"sbatch_options": list(resource_options(decided))})
    else:
        show_plan(decided, hang_limit_s)
    for warning in decided.warnings:
        console.warning(warning)


def _software_rows(decided: Plan) -> list[tuple[str, str]]:
    software = decided.software
    rows = []
    if software.stack:
        rows.append(("software", f"{software.stack}: {software.description}".rstrip(": ")))
    if software.setup:
        rows.append(("setup", "; ".join(software.setup)))
    if software.container_image:
        rows.append(("container", f"{software.container_command} {software.container_image}"))
    if software.squashfs:
        rows.append(("packages", f"{software.squashfs} (squashfs venv)"))
    elif software.venv:
        rows.append(("packages", f"venv {software.venv}"))
    return rows


def show_plan(decided: Plan, hang_limit_s: float) -> None:
    """The decisions, the #SBATCH lines and the cost, on stdout."""
    processes = (
        f"Slurm starts {decided.tasks_per_node} task per node, {decided.mode} starts "
        f"{decided.gpus_per_node} processes in it"
        if decided.tasks_per_node == 1 and decided.gpus_per_node > 1
        else f"Slurm starts {decided.tasks_per_node} task(s) per node ({decided.mode})"
    )
    time_limit = format_slurm_time(decided.time_seconds)
    rows = [
        ("partition", f"{decided.partition} ({decided.partition_reason})"),
        (
            "processes",
            f"{decided.world_size} = {decided.nodes} node{'s' * (decided.nodes > 1)} × "
            f"{decided.gpus_per_node} GPUs; {processes}",
        ),
        ("cores", f"{decided.cpus_per_task} per task = {decided.cpus_per_gpu} per GPU"),
        (
            "memory",
            f"{decided.memory_gb_per_node}G per node"
            if decided.memory_gb_per_node
            else "not requested (the site's default per GPU)",
        ),
        ("time", f"{time_limit} ({describe_duration(decided.time_seconds)})"),
    ]
    if decided.per_gpu_batch_size is not None:
        rows.append(
            (
                "batch",
                f"{decided.global_batch_size} = {decided.per_gpu_batch_size} per "
                f"GPU × {decided.world_size} GPUs × {decided.accumulation_steps}",
            )
        )
    billing = decided.billing
    if billing is not None:
        rows.append(
            (
                "billing",
                f"{billing.units_per_hour:g} {billing.unit} per hour = "
                f"{billing.arithmetic}; {billing.total_units:g} for {time_limit}",
            )
        )
        rows.append(("rule", billing.rule))
    rows.append(("lost work", failure_cost(decided, hang_limit_s)))
    rows.extend(("export", f"{key}={value}") for key, value in decided.environment.items())
    rows.extend(_software_rows(decided))
    console.show(console.table(rows, title=f"plan: {decided.world_size} GPUs on {decided.cluster}"))
    console.show_text("".join(f"#SBATCH {option}\n" for option in resource_options(decided)))
    if decided.memory_estimates:
        show_memory(decided)


def show_memory(decided: Plan) -> None:
    """Memory per GPU under each strategy, and the suggested one, for the requested model."""
    parameters = decided.model_parameters or 0
    rows: list[tuple[console.Piece, ...]] = []
    for estimate in decided.memory_estimates:
        activations = estimate.activations_gb
        rows.append(
            (
                estimate.strategy,
                f"{estimate.model_states_gb:,.1f} GB",
                "?" if activations is None else f"{activations:,.1f} GB",
                f"{estimate.total_gb:,.1f} GB",
                "yes" if estimate.fits else ("no", "error"),
            )
        )
    console.show(
        console.table(
            rows,
            title=f"memory per GPU: {parameters / 1e9:.3g} B parameters, "
            f"{decided.world_size} × {decided.gpu_memory_gb:g} GB",
            columns=("strategy", "model states", "activations", "total", "fits"),
            right_aligned=("model states", "activations", "total", "fits"),
        )
    )
    if decided.memory_estimates[0].activations_gb is None:
        console.info("activations not counted: give --layers, --width and --seq-len too")
    if decided.suggested_strategy is not None:
        console.success(
            f"suggested: st.wrap(model, optimizer, strategy={decided.suggested_strategy!r}) "
            "(the least communication that fits; see docs/strategies.md)"
        )
