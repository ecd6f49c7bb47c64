"""`scaletrain plan`: decide partition, shape, cores, memory and cost before submitting."""

from __future__ import annotations

import json
import os

import typer
from rich.markup import escape
from rich.table import Table

from scaletrain.cli.request_options import request_options
from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.slurm_time import describe_duration, format_slurm_time
from scaletrain.core import console
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request


@request_options
def plan(
    ctx: typer.Context,
    request: Request,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
) -> None:
    """Plan a Slurm job for SCRIPT: partition, nodes, tasks, cores, memory, cost.

    Writes nothing. Impossible or wasteful requests stop here with what to ask for instead.

    Example: [bold]scaletrain plan --cluster lumi --gpus 16 --time 2:00:00 train.py[/bold]
    """
    decided = plan_job(request, load_profile(request.cluster, dict(os.environ)))
    if as_json:
        record = decided.to_dict() | {"sbatch_options": list(resource_options(decided))}
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return
    show_plan(decided)


def show_plan(decided: Plan) -> None:
    """The decisions, the #SBATCH lines, the cost and the warnings, for people."""
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
    rows.extend(("export", f"{key}={value}") for key, value in decided.environment.items())
    if decided.setup:
        rows.append(("setup", "; ".join(decided.setup)))
    table = Table(
        title=f"plan: {decided.world_size} GPUs on {decided.cluster}",
        title_justify="left",
        show_header=False,
    )
    for label, text in rows:
        table.add_row(label, escape(text))
    console.console.print(table)
    for option in resource_options(decided):
        console.console.print(f"#SBATCH {option}", markup=False, highlight=False)
    if decided.memory_estimates:
        show_memory(decided)
    for warning in decided.warnings:
        console.warning(warning)


def show_memory(decided: Plan) -> None:
    """Memory per GPU under each strategy, and the suggested one, for the requested model."""
    parameters = decided.model_parameters or 0
    table = Table(
        title=f"memory per GPU: {parameters / 1e9:.3g} B parameters, {decided.world_size} × "
        f"{decided.gpu_memory_gb:g} GB",
        title_justify="left",
    )
    for column in ("strategy", "model states", "activations", "total", "fits"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for estimate in decided.memory_estimates:
        activations = estimate.activations_gb
        table.add_row(
            estimate.strategy,
            f"{estimate.model_states_gb:,.1f} GB",
            "?" if activations is None else f"{activations:,.1f} GB",
            f"{estimate.total_gb:,.1f} GB",
            "yes" if estimate.fits else "[error]no[/error]",
        )
    console.console.print(table)
    if decided.memory_estimates[0].activations_gb is None:
        console.info("activations not counted: give --layers, --width and --seq-len too")
    if decided.suggested_strategy is not None:
        console.success(
            f"suggested: st.wrap(model, optimizer, strategy={decided.suggested_strategy!r}) "
            "(the least communication that fits; see docs/strategies.md)"
        )
