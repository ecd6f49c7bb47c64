"""The install lines of the docs, run as written into fresh venvs: the README's on a login
node, Puhti's and Mahti's over the site's `pytorch` module, LUMI's inside the site's image.

Each block is marked `<!-- not run: installs; tests/docs/test_install.py runs these lines ...
-->` and run here as a bash script, in a home folder of its own that holds a copy of this
checkout at ~/scaletrain (as a user's clone would be). Site paths that cannot exist here
(/projappl/..., /project/..., the LAIF image) are swapped for temporary folders and the test
cluster's stand-ins (tests/support/module_stack.py, container.py), and nothing else. pip
reads PyPI, as on the sites' login nodes, for scaletrain's build tools and dependencies.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_environ
from tests.support.container import build_image
from tests.support.doc_samples import Block, blocks
from tests.support.module_stack import build_module_stack

pytestmark = pytest.mark.long

MARKER = "tests/docs/test_install.py runs these lines"
# The installs download build tools and dependencies from PyPI.
INSTALL_TIMEOUT_S = 600


def install_block(document: Path) -> Block:
    (found,) = [b for b in blocks(document) if b.not_run and MARKER in b.not_run]
    return found


def user_home(tmp_path: Path) -> Path:
    """A home folder with a copy of this checkout at ~/scaletrain: the files git tracks."""
    home = tmp_path / "home"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    )
    for name in listed.stdout.decode().split("\0"):
        if name and (REPO / name).is_file():
            target = home / "scaletrain" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
    return home


def run_lines(
    block: Block, home: Path, environ: dict[str, str], swaps: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The block's lines as one bash script (stopping at the first that fails)."""
    script = "\n".join(block.lines)
    for site_path, here in (swaps or {}).items():
        script = script.replace(site_path, here)
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=home,
        env={**environ, "HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )


def plain_environ() -> dict[str, str]:
    """A login shell's environment: no venv active, the machine's python3 first."""
    environ = clean_environ()
    environ.pop("VIRTUAL_ENV", None)
    environ["PATH"] = ":".join(
        part for part in environ["PATH"].split(":") if not part.startswith(str(REPO))
    )
    return environ


def test_the_readme_installs_the_command_line_tool_without_torch(tmp_path: Path) -> None:
    home = user_home(tmp_path)
    result = run_lines(install_block(REPO / "README.md"), home, plain_environ())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lumi" in result.stdout and "puhti" in result.stdout  # `scaletrain clusters`
    python = home / "venvs" / "scaletrain" / "bin" / "python"
    no_torch = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert no_torch.stdout.strip() == "None"


@pytest.mark.slurm
def test_puhti_and_mahti_install_into_a_venv_over_the_module(tmp_path: Path) -> None:
    home = user_home(tmp_path)
    stack = build_module_stack()
    environ = stack.login_environ(plain_environ())
    projappl = tmp_path / "projappl"
    block = install_block(REPO / "docs" / "site-puhti-mahti.md")
    result = run_lines(block, home, environ, {"/projappl/project_2001234": str(projappl)})
    assert result.returncode == 0, result.stdout + result.stderr
    # The venv's Python has the module's torch and the installed scaletrain (not an editable
    # link to this checkout).
    python = projappl / "venvs" / "train" / "bin" / "python3"
    found = subprocess.run(
        [python, "-c", "import scaletrain, torch; print(scaletrain.__file__)"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith(str(projappl / "venvs" / "train")), found.stdout


@pytest.mark.slurm
def test_lumi_installs_inside_the_image(tmp_path: Path) -> None:
    home = user_home(tmp_path)
    image = build_image()
    stack = build_module_stack()
    environ = image.environ(stack.login_environ(plain_environ()))
    project = tmp_path / "project"
    (project / "venvs").mkdir(parents=True)
    swaps = {
        "/appl/local/laifs/containers/lumi-multitorch-latest.sif": str(image.path),
        "/appl/local/laifs/modules": str(stack.modulefiles),
        "/project/project_465000000": str(project),
    }
    result = run_lines(install_block(REPO / "docs" / "site-lumi.md"), home, environ, swaps)
    assert result.returncode == 0, result.stdout + result.stderr
    # The image's Python has no scaletrain; the venv made in it has, over the image's torch.
    venv = project / "venvs" / "vit"
    check = "import scaletrain, torch; print(scaletrain.__file__)"
    inside = ["singularity", "exec", str(image.path)]
    bare = subprocess.run(
        [*inside, "python3", "-c", check], env=environ, capture_output=True, text=True, timeout=120
    )
    assert "No module named 'scaletrain'" in bare.stderr
    found = subprocess.run(
        [*inside, f"{venv}/bin/python3", "-c", check],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith(str(venv)), found.stdout
