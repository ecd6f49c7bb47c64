"""The `scaletrain` command: sub-commands registered here, each in a module of its own."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from importlib import import_module
from typing import Any

import typer
from typer import _click

from scaletrain import __version__
from scaletrain.cli.command_line import ScaletrainCommand, ScaletrainGroup
from scaletrain.cli.start import requested_command

app = typer.Typer(
    name="scaletrain",
    cls=ScaletrainGroup,
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
    """Global options (read by the error path in command_line.py)."""


# Commands that take a training script: everything after the script belongs to the script
# (scaletrain's own options there are refused, see `script_arguments`).
SCRIPT_COMMAND = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
}

# Each command lives in a module of its own, imported only when that command runs (all of
# them for --help): `scaletrain run` should not pay for the planner's or the doctor's imports.
# name -> (module, attribute, click context settings); in the order --help lists them.
COMMANDS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "run": ("scaletrain.cli.run", "run", SCRIPT_COMMAND),
    "plan": ("scaletrain.cli.plan", "plan", SCRIPT_COMMAND),
    "submit": ("scaletrain.cli.submit", "submit", SCRIPT_COMMAND),
    "status": ("scaletrain.cli.status", "status", None),
    "cost": ("scaletrain.cli.cost", "cost", None),
    "logs": ("scaletrain.cli.logs", "logs", None),
    "cancel": ("scaletrain.cli.cancel", "cancel", None),
    "stacks": ("scaletrain.cli.stacks", "stacks", None),
    "clusters": ("scaletrain.cli.clusters", "clusters_app", None),
    "check": ("scaletrain.cli.check", "check", None),
    "bench": ("scaletrain.cli.bench", "bench", None),
    "doctor": ("scaletrain.cli.doctor", "doctor", None),
    "monitor": ("scaletrain.cli.monitor", "monitor", None),
    "analyze": ("scaletrain.cli.analyze", "analyze", None),
    "scale": ("scaletrain.cli.scale", "scale", SCRIPT_COMMAND),
    "export": ("scaletrain.cli.export", "export", None),
}

_registered: set[str] = set()


def register(names: Iterable[str]) -> None:
    """Import the named commands and add them to the app (once each)."""
    for name in names:
        if name in _registered:
            continue
        module, attribute, context_settings = COMMANDS[name]
        command = getattr(import_module(module), attribute)
        if isinstance(command, typer.Typer):
            app.add_typer(command, name=name)
        else:
            app.command(name=name, cls=ScaletrainCommand, context_settings=context_settings)(
                command
            )
        _registered.add(name)


def command_line(names: Iterable[str] = COMMANDS) -> _click.Command:
    """The click command of `scaletrain` with the named sub-commands (all by default)."""
    register(names)
    return typer.main.get_command(app)


def main() -> None:
    """Entry point: only the requested command is imported (all of them for --help)."""
    requested = requested_command(sys.argv[1:])
    names = [requested] if requested in COMMANDS else COMMANDS
    command_line(names).main(prog_name="scaletrain")
