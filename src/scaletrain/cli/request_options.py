"""The resource request options of `plan` and `submit`, defined once.

`@request_options` gives a command the parameters of `_request_parameters` below (the script,
its arguments, --cluster, --gpus, ...) and hands it the `Request` they make, as `request`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

from scaletrain.cli.common import SCRIPT_ARGUMENT, script_arguments
from scaletrain.planning.modes import DEFAULT_MODE, launch_modes
from scaletrain.planning.request import Request


def _request_parameters(
    script: str = SCRIPT_ARGUMENT,
    cluster: str = typer.Option(
        ..., "--cluster", "-c", envvar="SCALETRAIN_CLUSTER", help="Cluster profile, e.g. lumi."
    ),
    time: str = typer.Option(
        ...,
        "--time",
        "-t",
        help="Wall time: H:MM:SS (2:00:00), D-HH:MM:SS, or minutes (30); Slurm reads 1:00 "
        "as one minute.",
    ),
    gpus: int | None = typer.Option(None, "--gpus", "-g", help="GPUs in total (whole nodes)."),
    nodes: int | None = typer.Option(None, "--nodes", "-N", help="Nodes (with --gpus-per-node)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs on each node."),
    partition: str | None = typer.Option(
        None, "--partition", "-p", help="Partition; chosen for you when left out."
    ),
    mode: str = typer.Option(
        DEFAULT_MODE,
        "--mode",
        "-m",
        envvar="SCALETRAIN_MODE",
        help=f"How processes start: {', '.join(launch_modes())}.",
    ),
    cpus_per_gpu: int | None = typer.Option(
        None, "--cpus-per-gpu", help="Cores per GPU (default: the cluster's fair share)."
    ),
    memory_per_gpu: int | None = typer.Option(
        None, "--memory-per-gpu", help="Memory per GPU in GB (default: the cluster's)."
    ),
    global_batch_size: int | None = typer.Option(
        None, "--global-batch-size", help="Samples per step over all GPUs; must split evenly."
    ),
    accumulation_steps: int = typer.Option(
        1, "--accumulation-steps", help="Gradient accumulation steps per optimizer step."
    ),
    account: str | None = typer.Option(
        None,
        "--account",
        "-A",
        envvar=["SCALETRAIN_ACCOUNT", "SBATCH_ACCOUNT"],
        help="Project to bill, e.g. project_465000000.",
    ),
    job_name: str | None = typer.Option(None, "--job-name", help="Slurm job name."),
    container: str | None = typer.Option(
        None, "--container", help="Container image to run in (e.g. a .sif file)."
    ),
) -> None:
    """Never called: its signature is the request options (see `request_options`)."""


_SHARED = inspect.signature(_request_parameters, eval_str=True).parameters


# Options named for the command line, fields named for the planner.
_FIELD_NAMES = {"memory_per_gpu": "memory_gb_per_gpu", "container": "container_image"}


def _request(ctx: typer.Context, values: dict[str, Any]) -> Request:
    fields = {_FIELD_NAMES.get(name, name): value for name, value in values.items()}
    return Request(script_args=script_arguments(ctx, fields["script"]), **fields)


def request_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the request options to `command(ctx, request, <its own options>)`."""
    own = [
        parameter
        for name, parameter in inspect.signature(command, eval_str=True).parameters.items()
        if name not in ("ctx", "request")
    ]

    @functools.wraps(command)
    def with_request(ctx: typer.Context, **values: Any) -> None:
        shared = {name: values.pop(name) for name in _SHARED}
        command(ctx=ctx, request=_request(ctx, shared), **values)

    context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = [context.replace(annotation=typer.Context), *_SHARED.values(), *own]
    # typer reads the signature and the annotations; the wrapped command's are not these.
    with_request.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    with_request.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_request
