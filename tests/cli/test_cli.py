"""What a new user sees first: help, version, and a login node without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scaletrain import __version__
from tests.conftest import clean_environ, scaletrain


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
