"""The job's check of its Python (templates/import_check.py), run as the job runs it: a missing
package stops the job, a module that may be the user's own is a warning, scaletrain missing
for its own checks leaves them out; the script's folder is searched as Python searches it."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from scaletrain.launch.environment_check import IMPORT_CHECK, TOOLS_MISSING_STATUS
from scaletrain.launch.job_programs import program_text
from tests.conftest import clean_environ


def check(*words: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-", *words],
        input=program_text(IMPORT_CHECK),
        cwd=cwd,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kinds_of_missing_modules(tmp_path: Path) -> None:
    assert check("need:json", "maybe:csv", cwd=tmp_path).returncode == 0
    missing = check("need:json", "need:no_such_package", cwd=tmp_path)
    assert missing.returncode == 1
    assert "cannot import no_such_package." in missing.stderr
    # A name the script imports that may be the user's own: a warning, the job goes on.
    yours = check("need:json", "maybe:resources", cwd=tmp_path)
    assert yours.returncode == 0, yours.stderr
    assert "warning: the job's Python" in yours.stderr and "cannot import resources" in yours.stderr
    # scaletrain's own checks are left out when it is missing, with a status that says so.
    tools = check("need:json", "tool:no_such_tool", cwd=tmp_path)
    assert tools.returncode == TOOLS_MISSING_STATUS
    assert "trains without the preflight, the GPU monitor and the hang watchdog" in tools.stderr
    # A missing package still stops the job, whatever else is missing.
    assert check("need:nope", "tool:no_such_tool", cwd=tmp_path).returncode == 1


def test_a_torch_outside_the_tested_range_is_named(tmp_path: Path) -> None:
    installed = importlib.metadata.version("torch")  # as pip installed it
    assert "has torch" not in check("need:json", "tested:2.0:2.99", cwd=tmp_path).stderr
    outside = check("need:json", "tested:2.0:2.1", cwd=tmp_path)
    assert outside.returncode == 0  # a warning: it may well work
    assert f"has torch {installed}; scaletrain is tested with torch 2.0 to 2.1" in (outside.stderr)


def test_the_scripts_folder_is_searched_first(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "resources").mkdir(parents=True)
    (scripts / "resources" / "__init__.py").write_text("")
    found = check("path:scripts", "need:resources", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert check("need:resources", cwd=tmp_path).returncode == 1


def test_the_program_runs_on_an_older_python_syntax() -> None:
    """The job's Python may be older than scaletrain's: no annotations, no docstrings."""
    for name in (IMPORT_CHECK, "rendezvous_store.py"):
        text = program_text(name)
        assert "list[str]" not in text and "-> " not in text and '"""' not in text, name
        ast.parse(text, feature_version=(3, 8))
