"""`scaletrain clusters`: list the cluster profiles; `clusters show NAME` explains one."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import typer
from rich.table import Table

from scaletrain.cli.command_line import ScaletrainCommand, ScaletrainGroup
from scaletrain.cli.common import JSON_OPTION
from scaletrain.clusters.billing import describe_rule
from scaletrain.clusters.catalog import (
    load_profile,
    profile_files,
    read_profile,
    user_profile_folder,
)
from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import describe_duration
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError

clusters_app = typer.Typer(
    cls=ScaletrainGroup,
    help=(
        "List the cluster profiles (LUMI, Puhti, Mahti, this machine, your own site); "
        "[bold]clusters show NAME[/bold] explains one."
    ),
    no_args_is_help=False,
    rich_markup_mode="rich",
)


@clusters_app.callback(invoke_without_command=True)
def list_clusters(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """List the cluster profiles (packaged, and yours in ~/.config/scaletrain/clusters/)."""
    if ctx.invoked_subcommand is not None:
        return
    environ = dict(os.environ)
    rows, listed, broken = [], [], []
    for profile_file in profile_files(environ).values():
        try:
            profile = read_profile(profile_file, environ)
        except ScaletrainError as error:  # a broken file of the user's: listed, not fatal
            broken.append(error)
            continue
        where = (
            profile.source if profile_file.origin == "user" else f"packaged: {profile.name}.toml"
        )
        gpu = f"{profile.node.accelerator} {profile.node.gpu_description}"
        partitions = ", ".join(profile.partitions)
        rows.append((profile.name, gpu, str(profile.node.gpus), partitions, where))
        listed.append({"name": profile.name, "origin": profile_file.origin, "file": where})
    if as_json:
        console.show_json(listed)
    else:
        columns = ("name", "GPU", "GPUs/node", "partitions", "file")
        console.show(console.table(rows, title="cluster profiles", columns=columns))
    console.info(f"your own profiles: {user_profile_folder(environ)}/<name>.toml")
    for problem in broken:
        console.warning(f"{problem.problem} HINT: {problem.hint}")


@clusters_app.command("show", cls=ScaletrainCommand)
def show_cluster(
    name: str = typer.Argument(..., metavar="NAME", help="Cluster name, e.g. lumi."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Explain one cluster: partitions and limits, fair share per GPU, billing, network."""
    profile = load_profile(name, dict(os.environ))
    if as_json:
        console.show_json(asdict(profile))
        return
    console.show(console.text((f"{profile.name}: {profile.description}", "heading")))
    facts = console.table(
        [((label, "muted"), text) for label, text in _facts(profile)],
        box=None,
        pad_edge=False,
    )
    console.show(facts)
    console.show(_partition_table(profile))


@clusters_app.command("detect", cls=ScaletrainCommand)
def detect_cluster(
    name: str | None = typer.Option(
        None, "--name", help="Profile name (default: Slurm's ClusterName)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the draft here instead of printing it."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --output if it exists."),
) -> None:
    """Draft a profile for this site from its live Slurm (run it on a login node).

    Slurm tells cores, memory, GPUs and partition limits; the draft marks with CHECK what it
    cannot tell (billing, CPU masks per GPU, network settings, how to load PyTorch).
    """
    # Only this sub-command reads Slurm: listing profiles does not import its parsers.
    from scaletrain.clusters.detect import draft_profile
    from scaletrain.slurm import commands as slurm

    environ = dict(os.environ)
    name = name or slurm.cluster_name(environ=environ)
    draft = draft_profile(name, slurm.partitions(environ=environ), slurm.nodes(environ=environ))
    if output is None:
        print(draft.text, end="")
    elif output.exists() and not force:
        raise ScaletrainError(
            f"{output} exists already.", "choose another --output, or add --force to replace it."
        )
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(draft.text, encoding="utf-8")
        console.success(f"wrote {output}")
    console.info(f"nodes: {draft.node_type.describe()}; partitions: {', '.join(draft.partitions)}")
    for skipped in draft.skipped:
        console.warning(f"left out partition {skipped}: other nodes than the profile describes")
    destination = user_profile_folder(environ) / f"{name}.toml"
    console.info(
        f"review the lines marked CHECK, then save it as {destination} "
        f"and try `scaletrain clusters show {name}`"
    )


def _facts(profile: ClusterProfile) -> list[tuple[str, str]]:
    node, slurm = profile.node, profile.slurm
    memory = f", {node.usable_memory_gb} GB" if node.usable_memory_gb else ""
    fair_memory = profile.fair_share_memory_gb
    default = profile.default_per_gpu
    rows = [
        ("file", profile.source),
        (
            "node",
            f"{node.gpus} × {node.gpu_description} ({node.accelerator}), {node.usable_cores} "
            f"cores{memory} usable by jobs",
        ),
        (
            "fair share",
            f"per GPU: {profile.fair_share_cores} cores"
            + (f", {fair_memory} GB" if fair_memory else "")
            + "; more is billed or keeps other jobs off the node",
        ),
        (
            "planner asks",
            f"per GPU: {default.cores} cores"
            + (
                f", {default.memory_gb} GB (--mem, per node)"
                if slurm.request_memory
                else "; no --mem (the site assigns memory)"
            ),
        ),
        ("GPU option", slurm.gpu_request.format(gpus="N") if slurm.gpu_request else "none"),
    ]
    if node.cpu_masks:
        rows.append(
            _sourced(profile, "node.cpu_masks", "CPU masks", "GPU 0..: " + ",".join(node.cpu_masks))
        )
    for name, value in profile.exported.items():
        expanded = " (expanded in the job)" if name in profile.expanded else ""
        rows.append(_sourced(profile, f"environment.{name}", "export", f"{name}={value}{expanded}"))
    rows.extend(_software(profile))
    if profile.billing:
        rows.append(("billing", f"{profile.billing.unit}: {profile.billing.meaning}"))
    return rows


def _software(profile: ClusterProfile) -> list[tuple[str, str]]:
    """The stacks (default first) and per-task lines, each with its source."""
    software, rows = profile.software, []
    for name, stack in sorted(
        software.stacks.items(), key=lambda item: item[0] != software.default
    ):
        default = " (default)" if name == software.default else ""
        parts = [stack.description] if stack.description else []
        if stack.setup:
            parts.append("; ".join(stack.setup))
        if stack.container_command:
            parts.append(f"{stack.container_command} {stack.image or '<--container IMAGE>'}")
        rows.append(
            _sourced(
                profile, f"software.stacks.{name}", f"stack {name}{default}", " | ".join(parts)
            )
        )
    if software.task_setup:
        rows.append(
            _sourced(profile, "software.task_setup", "every task", "; ".join(software.task_setup))
        )
    return rows


def _sourced(profile: ClusterProfile, key: str, label: str, text: str) -> tuple[str, str]:
    """A row whose text ends with the setting's date and source, when the profile has one."""
    source = profile.source_of(key)
    return (label, f"{text}\n  [{source}]" if source else text)


def _partition_table(profile: ClusterProfile) -> Table:
    rows = []
    for name, partition in profile.partitions.items():
        limit = partition.max_time_seconds
        limits = [
            f"{value} {what}"
            for value, what in (
                (partition.max_nodes, "nodes"),
                (partition.max_gpus, "GPUs"),
                (partition.max_gpus_per_node, "GPUs per node"),
            )
            if value is not None
        ]
        allocation = "whole nodes" if partition.whole_nodes else "by GPU, cores, memory"
        billing = (
            describe_rule(partition.billing, profile.billing.unit)
            if partition.billing and profile.billing
            else "not billed"
        )
        rows.append(
            (
                name,
                describe_duration(limit) if limit else "none",
                ", ".join(f"≤ {text}" for text in limits),
                allocation + (" (--exclusive)" if partition.exclusive else ""),
                billing,
                ("yes" if partition.auto else "only if named")
                + ("; rehearsals" if partition.rehearsal else ""),
            )
        )
    columns = ("name", "time limit", "limits", "allocation", "billing", "auto")
    return console.table(rows, title="partitions", columns=columns)
