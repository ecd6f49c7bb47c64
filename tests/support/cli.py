"""scaletrain's command line in this process (typer's CliRunner): the same code path as the
installed command, some milliseconds per call instead of a second, for tests of many inputs.

Nothing that starts processes runs this way: `run`, `check` and `bench` are only given input
they must refuse before starting anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from scaletrain.cli.app import app, command_line
from scaletrain.cli.command_line import INTERNAL_ERROR_EXIT_CODE

# Variables of the machine's user or launcher that would change what a command does.
_UNSET_PREFIXES = ("SCALETRAIN_", "SLURM_", "SBATCH_")


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int
    stdout: str
    stderr: str


def login_node(home: Path, **extra: str) -> dict[str, str | None]:
    """A login node without Slurm and without the user's profiles: PATH has no Slurm command,
    the config folder is `home`/config; launcher variables of this machine are unset."""
    empty = home / "no-slurm"
    empty.mkdir(exist_ok=True)
    environ: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith(_UNSET_PREFIXES)
    }
    return environ | {
        "PATH": str(empty),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        **extra,
    }


def invoke(*args: str, env: Mapping[str, str | None]) -> Outcome:
    """`scaletrain <args>` in this process, in the current folder, with `env` set."""
    command_line()  # every command, as `scaletrain --help` sees them
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"`scaletrain {' '.join(args)}` raised {result.exception!r}")
    return Outcome(result.exit_code, result.stdout, result.stderr)


def assert_clean(outcome: Outcome, command: str) -> None:
    """No traceback and no internal error: every problem is one error line and a HINT."""
    shown = outcome.stdout + outcome.stderr
    assert "Traceback" not in shown, f"{command}:\n{shown}"
    assert outcome.exit_code != INTERNAL_ERROR_EXIT_CODE, f"{command}:\n{shown}"
    if outcome.exit_code == 2:
        lines = outcome.stderr.splitlines()
        assert [line[:6] for line in lines[-2:]] == ["error:", "HINT: "], f"{command}:\n{shown}"
