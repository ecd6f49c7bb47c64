"""The resource request options of `plan` and `submit`, defined once.

`@request_options` gives a command the parameters of `_request_parameters` below (the script,
its arguments, --cluster, --gpus, ...) and hands it the `Request` they make, as `request`.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from scaletrain.cli.common import SCRIPT_ARGUMENT, script_arguments
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.memory import ModelSize, parse_count
from scaletrain.planning.modes import DEFAULT_MODE, launch_modes
from scaletrain.planning.request import Request
from scaletrain.planning.software import NO_VENV, SoftwareChoice

_MODEL_PANEL = "Model (memory estimate)"
_PRECISIONS = ("bf16", "fp16", "fp32")


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
    stack: str | None = typer.Option(
        None, "--stack", help="The cluster's software stack to use (see `clusters show`)."
    ),
    container: str | None = typer.Option(
        None, "--container", help="Container image to run in (e.g. a .sif file)."
    ),
    venv: str | None = typer.Option(
        None,
        "--venv",
        help="Your venv, activated after the module load or put first on PATH in the "
        "container; 'none' for none. Default: the venv this command runs from (modules only).",
    ),
    squashfs: str | None = typer.Option(
        None, "--squashfs", help="Your venv packed with mksquashfs, mounted in the container."
    ),
    bind: list[str] = typer.Option(
        [],
        "--bind",
        metavar="SRC[:DEST[:OPTS]]",
        help="Also bind this into the container (src[:dest[:opts]]); repeatable.",
    ),
    env: list[str] = typer.Option(
        [],
        "--env",
        metavar="NAME=VALUE",
        help="Export NAME=VALUE in the job, exactly as written; repeatable.",
    ),
    env_expand: list[str] = typer.Option(
        [],
        "--env-expand",
        metavar="NAME=VALUE",
        help="Export NAME=VALUE with $VARIABLES expanded when the job runs; repeatable.",
    ),
    setup: list[str] = typer.Option(
        [], "--setup", metavar="LINE", help="A shell line run after the software setup; repeatable."
    ),
    before: list[str] = typer.Option(
        [],
        "--before",
        metavar="COMMAND",
        help="A command run once on every node before training; repeatable.",
    ),
    after: list[str] = typer.Option(
        [],
        "--after",
        metavar="COMMAND",
        help="A command run once on every node after training; repeatable.",
    ),
    sbatch: list[str] = typer.Option(
        [],
        "--sbatch",
        metavar="OPTION",
        help="Another #SBATCH option, e.g. --sbatch=--exclusive; repeatable.",
    ),
    launcher_arg: list[str] = typer.Option(
        [],
        "--launcher-arg",
        metavar="ARG",
        help="A flag for the launcher (torchrun, accelerate; srun in per-GPU modes); repeatable.",
    ),
    visible_gpus: str | None = typer.Option(
        None,
        "--visible-gpus",
        help="srun mode: 'node' (each task sees every GPU of its node; for scripts that pick "
        "cuda:<LOCAL_RANK>) or 'own' (only its own, as cuda:0). Default: read from the script.",
    ),
    local_rank_arg: str | None = typer.Option(
        None,
        "--local-rank-arg",
        metavar="yes|no",
        help="deepspeed mode: pass the script --local_rank=N, as deepspeed's launcher does. "
        "Default: when the script's argument parser takes it.",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="bf16, fp16 or fp32: accelerate's --mixed_precision (other launchers take none: "
        "your script sets it) and the memory estimate's (default bf16).",
    ),
    model_params: str | None = typer.Option(
        None,
        "--model-params",
        help="Parameters of your model (124M, 1.3B): memory per GPU under each strategy.",
        rich_help_panel=_MODEL_PANEL,
    ),
    layers: int | None = typer.Option(
        None,
        "--layers",
        help="Transformer layers (activations need all three).",
        rich_help_panel=_MODEL_PANEL,
    ),
    width: int | None = typer.Option(
        None, "--width", help="Hidden size (d_model).", rich_help_panel=_MODEL_PANEL
    ),
    seq_len: int | None = typer.Option(
        None, "--seq-len", help="Tokens per sample.", rich_help_panel=_MODEL_PANEL
    ),
    activation_checkpointing: bool = typer.Option(
        False,
        "--activation-checkpointing",
        help="Blocks recompute their activations.",
        rich_help_panel=_MODEL_PANEL,
    ),
) -> None:
    """Never called: its signature is the request options (see `request_options`)."""


_SHARED = inspect.signature(_request_parameters, eval_str=True).parameters


# Options named for the command line, fields named for the planner.
_FIELD_NAMES = {"memory_per_gpu": "memory_gb_per_gpu"}
_YES_NO = {"yes": True, "no": False}


def _precision(given: str | None) -> str | None:
    if given is not None and given not in _PRECISIONS:
        raise ScaletrainError(
            f"Unknown --precision {given!r}.", f"use one of {', '.join(_PRECISIONS)}."
        )
    return given


def _model_size(values: dict[str, Any], precision: str | None) -> ModelSize | None:
    """The model the request names, from the model options (None without --model-params)."""
    parameters = values.pop("model_params")
    shape = {name: values.pop(name) for name in ("layers", "width", "seq_len")}
    recompute = values.pop("activation_checkpointing")
    if parameters is None:
        if any(value is not None for value in shape.values()):
            raise ScaletrainError(
                "--layers, --width and --seq-len describe the model of --model-params.",
                "add --model-params (e.g. 1.3B) for the memory estimate, or leave them out.",
            )
        return None
    return ModelSize(
        parameters=parse_count(parameters),
        precision="fp32" if precision == "fp32" else "bf16",  # fp16 takes what bf16 takes
        layers=shape["layers"],
        width=shape["width"],
        sequence_length=shape["seq_len"],
        activation_checkpointing=recompute,
    )


def _request(ctx: typer.Context, values: dict[str, Any]) -> Request:
    precision = _precision(values.pop("precision"))
    model = _model_size(values, precision)
    software = SoftwareChoice(
        stack=values.pop("stack"),
        container_image=values.pop("container"),
        venv=_absolute(values.pop("venv")),
        submitting_venv=submitting_venv(os.environ),
        squashfs=_absolute(values.pop("squashfs")),
        binds=tuple(values.pop("bind")),
    )
    extras = JobExtras(
        setup=tuple(values.pop("setup")),
        before=tuple(values.pop("before")),
        after=tuple(values.pop("after")),
        sbatch=tuple(values.pop("sbatch")),
        launcher_args=tuple(values.pop("launcher_arg")),
        precision=precision,
    )
    local_rank = _yes_or_no("--local-rank-arg", values.pop("local_rank_arg"))
    literal = _assignments("--env", values.pop("env"))
    expanded = _assignments("--env-expand", values.pop("env_expand"))
    fields = {_FIELD_NAMES.get(name, name): value for name, value in values.items()}
    return Request(
        script_args=script_arguments(ctx, fields["script"]),
        software=software,
        extras=extras,
        environment={**literal, **expanded},
        expand=tuple(expanded),
        model=model,
        local_rank_argument=local_rank,
        **fields,
    )


def submitting_venv(environ: Mapping[str, str]) -> str | None:
    """The venv this command runs from: an activated one (VIRTUAL_ENV), else the one whose
    python runs scaletrain (e.g. `~/venvs/train/bin/scaletrain` without activating it)."""
    if environ.get("VIRTUAL_ENV"):
        return environ["VIRTUAL_ENV"]
    return sys.prefix if sys.prefix != sys.base_prefix else None


def _absolute(path: str | None) -> str | None:
    """A folder or file for the job, as an absolute path (the job may run elsewhere)."""
    if path is None or path == NO_VENV:
        return path
    return str(Path(path).expanduser().absolute())


def _yes_or_no(option: str, given: str | None) -> bool | None:
    if given is not None and given not in _YES_NO:
        raise ScaletrainError(f"{option} {given!r} is not yes or no.", f"give {option} yes or no.")
    return None if given is None else _YES_NO[given]


def _assignments(option: str, given: list[str]) -> dict[str, str]:
    assignments = {}
    for item in given:
        name, equals, value = item.partition("=")
        if not equals:
            raise ScaletrainError(
                f"{option} {item!r} is not NAME=VALUE.", f"write e.g. {option} HF_HOME=/scratch/hf."
            )
        assignments[name] = value
    return assignments


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
