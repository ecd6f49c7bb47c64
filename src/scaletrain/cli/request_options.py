"""`@request_options` gives `plan` and `submit` the request options (cli/request_parameters.py:
the script, its arguments, --cluster, --gpus, ...) and hands each the `Request` they make, as
`request`. The values are checked where they are used: planning/request.py, extras.py,
memory.py."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from scaletrain.cli.common import script_arguments
from scaletrain.cli.request_parameters import request_parameters
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.memory import model_size
from scaletrain.planning.request import Request, parse_assignments
from scaletrain.planning.software import NO_VENV, SoftwareChoice, submitting_venv

_SHARED = inspect.signature(request_parameters, eval_str=True).parameters


# Options named for the command line, fields named for the planner.
_FIELD_NAMES = {"memory_per_gpu": "memory_gb_per_gpu"}
_YES_NO = {"yes": True, "no": False}


def _request(ctx: typer.Context, values: dict[str, Any]) -> Request:
    extras = JobExtras(
        setup=tuple(values.pop("setup")),
        before=tuple(values.pop("before")),
        after=tuple(values.pop("after")),
        sbatch=tuple(values.pop("sbatch")),
        launcher_args=tuple(values.pop("launcher_arg")),
        precision=values.pop("precision"),
    )
    model = model_size(
        values.pop("model_params"),
        layers=values.pop("layers"),
        width=values.pop("width"),
        sequence_length=values.pop("seq_len"),
        activation_checkpointing=values.pop("activation_checkpointing"),
        precision=extras.precision,
    )
    software = SoftwareChoice(
        stack=values.pop("stack"),
        container_image=values.pop("container"),
        venv=_absolute(values.pop("venv")),
        submitting_venv=submitting_venv(os.environ),
        squashfs=_absolute(values.pop("squashfs")),
        binds=tuple(values.pop("bind")),
    )
    local_rank = _yes_or_no("--local-rank-arg", values.pop("local_rank_arg"))
    literal = parse_assignments("--env", values.pop("env"))
    expanded = parse_assignments("--env-expand", values.pop("env_expand"))
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


def _absolute(path: str | None) -> str | None:
    """A folder or file for the job, as an absolute path (the job may run elsewhere)."""
    if path is None or path == NO_VENV:
        return path
    return str(Path(path).expanduser().absolute())


def _yes_or_no(option: str, given: str | None) -> bool | None:
    if given is not None and given not in _YES_NO:
        raise ScaletrainError(f"{option} {given!r} is not yes or no.", f"give {option} yes or no.")
    return None if given is None else _YES_NO[given]


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
