"""`scaletrain clusters show NAME`: one cluster explained: its node, fair share per GPU, what
the planner asks for, software stacks, partitions and their limits and billing, each
setting with its date and source."""

from __future__ import annotations

import os

import typer
from rich.table import Table

from scaletrain.cli.common import JSON_OPTION
from scaletrain.clusters.billing import describe_rule
from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import describe_duration
from scaletrain.core import console


def show_cluster(
    name: str = typer.Argument(..., metavar="NAME", help="Cluster name, e.g. lumi."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Explain one cluster: partitions and limits, fair share per GPU, billing, network."""
    profile = load_profile(name, dict(os.environ))
    if as_json:
        console.show_json(profile.model_dump(mode="json"))
        return
    console.show(console.text((f"{profile.name}: {profile.description}", "heading")))
    facts = console.table(
        [((label, "muted"), text) for label, text in _facts(profile)],
        box=None,
        pad_edge=False,
    )
    console.show(facts)
    console.show(_partition_table(profile))


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
