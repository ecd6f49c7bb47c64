"""The `scaletrain` command's entry point: what happens before the CLI is imported.

`scaletrain run` starts torchrun's Python first (launch/early_start.py), so that it imports
torch while the CLI below is imported and reads the options.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_HELP = ("--help", "-h")


def requested_command(arguments: Sequence[str]) -> str | None:
    """The sub-command named on the command line (global options are flags before it)."""
    return next((argument for argument in arguments if not argument.startswith("-")), None)


def main() -> None:
    arguments = sys.argv[1:]
    if requested_command(arguments) == "run" and not any(name in arguments for name in _HELP):
        from scaletrain.launch.early_start import start_torchrun_early

        start_torchrun_early()
    from scaletrain.cli.app import main as run_command_line

    run_command_line()
