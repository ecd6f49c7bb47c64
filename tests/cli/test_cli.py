"""What a new user sees first: help, version, and a login node without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scaletrain import __version__
from scaletrain.cli.command_line import INTERNAL_ERROR_EXIT_CODE
from tests.conftest import clean_environ, scaletrain
from tests.support.cli import invoke, login_node


def test_help_teaches_the_first_command(tmp_path: Path) -> None:
    result = scaletrain("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "scaletrain run --nproc 2 train.py" in result.stdout
    run_help = scaletrain("run", "--help", cwd=tmp_path)
    assert "--nproc" in run_help.stdout and "SCALETRAIN_NPROC" in run_help.stdout


def test_version(tmp_path: Path) -> None:
    assert scaletrain("--version", cwd=tmp_path).stdout.strip() == f"scaletrain {__version__}"


def test_the_command_line_does_not_import_torch() -> None:
    # Login nodes often have no torch: the CLI and `import scaletrain` must not need it.
    probe = (
        "import sys, scaletrain, scaletrain.cli.app, scaletrain.core.run_folder; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_help_lists_every_command_and_a_command_after_global_flags_runs(tmp_path: Path) -> None:
    from scaletrain.cli.app import COMMANDS

    listed = scaletrain("--help", cwd=tmp_path, environ=clean_environ(COLUMNS="200")).stdout
    assert all(f"│ {name} " in listed for name in COMMANDS)
    # Only the named command is imported; global flags before it must not hide it.
    result = scaletrain("--debug", "clusters", cwd=tmp_path)
    assert result.returncode == 0 and "lumi" in result.stdout + result.stderr


def test_debug_shows_the_traceback_that_an_error_line_replaces(tmp_path: Path) -> None:
    (tmp_path / "train.py").touch()
    request = ["plan", "-c", "nowhere", "-g", "1", "-t", "1:00:00", "train.py"]
    plain = scaletrain(*request, cwd=tmp_path)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.startswith("error: There is no cluster profile called 'nowhere'")
    debug = scaletrain("--debug", *request, cwd=tmp_path)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr and "ProfileError" in debug.stderr


def test_every_help_names_arguments_and_shows_no_types_of_flags(tmp_path: Path) -> None:
    from scaletrain.cli.app import COMMANDS

    environ = login_node(tmp_path, COLUMNS="100")
    pages = [["--help"], *([name, "--help"] for name in COMMANDS), ["clusters", "show", "--help"]]
    for page in pages:
        shown = invoke(*page, env=environ).stdout
        usage = next(line for line in shown.splitlines() if "Usage:" in line)
        assert "{" not in usage and "<" not in usage, usage
        assert "<bool>" not in shown and "<list" not in shown, page
    submit_usage = invoke("submit", "--help", env=environ).stdout
    assert "Usage: scaletrain submit [OPTIONS] SCRIPT [ARGS]..." in submit_usage


def test_a_bug_is_one_line_that_says_so_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No input reaches this path (the fuzz tests check that): a bug stands in for one.
    import scaletrain.cli.status

    def broken(*_: object) -> None:
        raise RuntimeError("a bug [in] scaletrain")

    monkeypatch.setattr(scaletrain.cli.status, "newest_launch", broken)
    outcome = invoke("status", env=login_node(tmp_path))
    assert outcome.exit_code == INTERNAL_ERROR_EXIT_CODE
    assert outcome.stderr.splitlines() == [
        "error: internal error: RuntimeError: a bug [in] scaletrain",
        "HINT: this is a bug in scaletrain, not in your input: rerun with --debug for the "
        "traceback and report it with the command you ran.",
    ]


def test_no_command_shows_the_help_and_no_error(tmp_path: Path) -> None:
    outcome = invoke(env=login_node(tmp_path))
    assert outcome.exit_code == 2  # click's usage code: no command was given
    assert "Usage: scaletrain [OPTIONS] COMMAND [ARGS]..." in outcome.stdout
    assert outcome.stderr == ""
