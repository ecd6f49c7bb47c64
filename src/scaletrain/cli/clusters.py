"""`scaletrain clusters`: list the cluster profiles; `clusters show NAME` explains one."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from scaletrain.cli.clusters_show import show_cluster
from scaletrain.cli.command_line import ScaletrainCommand, ScaletrainGroup
from scaletrain.cli.common import JSON_OPTION
from scaletrain.clusters.catalog import (
    profile_files,
    read_profile,
    user_profile_folder,
)
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
            profile = read_profile(profile_file)
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


clusters_app.command("show", cls=ScaletrainCommand)(show_cluster)


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
