"""`scaletrain check --cluster`: on a login node, the job's Python is checked as the job would
set it up, with the test cluster's real Lmod module (tests/support/module_stack.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import WORKERS, clean_environ, scaletrain
from tests.support.module_stack import ModuleStack, build_module_stack, make_user_venv


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleStack, Path]:
    folder = tmp_path_factory.mktemp("site")
    stack = build_module_stack()
    return stack, make_user_venv(stack, folder)


def test_the_modules_python_alone_lacks_scaletrain_and_says_how_to_add_it(
    site: tuple[ModuleStack, Path], tmp_path: Path
) -> None:
    stack, _ = site
    environ = stack.login_environ(clean_environ(COLUMNS="300"))
    # A script that does not import scaletrain trains without it: a warning, not a refusal.
    plain = WORKERS / "plain_ddp.py"
    result = scaletrain(
        "check", "--cluster", "local", "--venv", "none", "--script", str(plain),
        cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    python = stack.python_env / "bin" / "python3"
    assert f"the job's Python ({python}) has no scaletrain: your script trains without" in (
        result.stderr
    )
    assert "HINT: to have them, make a venv over the module once: module purge; module load" in (
        result.stderr
    )
    assert "warning: jobs of this software would train without scaletrain's own checks" in (
        result.stderr
    )
    # A script that imports scaletrain cannot train without it.
    converted = WORKERS / "progress.py"
    result = scaletrain(
        "check", "--cluster", "local", "--venv", "none", "--script", str(converted),
        cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"the job's Python ({python}) cannot import scaletrain." in result.stderr
    assert "HINT: make a venv over the module once: module purge; module load pytorch" in (
        result.stderr
    )


def test_a_venv_over_the_module_has_everything_the_script_imports(
    site: tuple[ModuleStack, Path], tmp_path: Path
) -> None:
    stack, venv = site
    environ = {**stack.login_environ(clean_environ(COLUMNS="300")), "VIRTUAL_ENV": str(venv)}
    (tmp_path / "train.py").write_text("import numpy\nimport torch\nimport wandb\n")
    result = scaletrain(
        "check", "--cluster", "local", "--script", "train.py", cwd=tmp_path, environ=environ
    )
    # The job would activate the venv it was submitted from; wandb is a package, not in it.
    assert result.returncode == 1, result.stderr
    assert "needs torch, numpy, wandb, scaletrain" in result.stderr
    assert "cannot import wandb." in result.stderr
    assert f"HINT: install them into {venv}" in result.stderr
    # A name that is no package scaletrain knows may be a module of the user's: a warning.
    (tmp_path / "train.py").write_text("import numpy\nimport torch\nimport my_helpers\n")
    result = scaletrain(
        "check", "--cluster", "local", "--script", "train.py", cwd=tmp_path, environ=environ
    )
    assert result.returncode == 0, result.stderr
    assert "warning: the job's Python" in result.stderr
    assert "cannot import my_helpers: fine if your script adds its own folder" in result.stderr
    assert "the job's Python imports torch, numpy, scaletrain" in result.stderr
