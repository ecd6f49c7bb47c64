"""The `scaletrain` command: sub-commands registered here, each in a module of its own."""

from __future__ import annotations

import sys

import typer

from scaletrain import __version__
from scaletrain.cli import console
from scaletrain.cli.bench import bench
from scaletrain.cli.cancel import cancel
from scaletrain.cli.check import check
from scaletrain.cli.clusters import clusters_app
from scaletrain.cli.doctor import doctor
from scaletrain.cli.logs import logs
from scaletrain.cli.plan import plan
from scaletrain.cli.run import run
from scaletrain.cli.status import status
from scaletrain.cli.submit import submit
from scaletrain.errors import ScaletrainError

app = typer.Typer(
    name="scaletrain",
    help=(
        "Take a PyTorch training script from one GPU to many GPUs and nodes.\n\n"
        "Start here: [bold]scaletrain run --nproc 2 train.py[/bold] runs your script as 2 "
        "processes on this machine, with logs and metrics in runs/<name>/."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}


def _show_version(value: bool) -> None:
    if value:
        print(f"scaletrain {__version__}")
        raise typer.Exit()


@app.callback()
def options(
    debug: bool = typer.Option(
        False,
        "--debug",
        envvar="SCALETRAIN_DEBUG",
        help="Show tracebacks instead of one-line errors.",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Global options."""
    _state["debug"] = debug


# Commands that take a training script: everything after the script belongs to the script,
# even options named like ours.
SCRIPT_COMMAND = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
}

app.command(context_settings=SCRIPT_COMMAND)(run)
app.command(context_settings=SCRIPT_COMMAND)(plan)
app.command(context_settings=SCRIPT_COMMAND)(submit)
app.add_typer(clusters_app, name="clusters")
app.command()(status)
app.command()(logs)
app.command()(cancel)
app.command()(check)
app.command()(bench)
app.command()(doctor)


def main() -> None:
    """Entry point: run the app, turning known problems into one clean line and exit code 2."""
    try:
        app()
    except ScaletrainError as problem:
        if _state["debug"]:
            raise
        console.error(problem.problem, problem.hint)
        sys.exit(2)
