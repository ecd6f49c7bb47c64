"""A LUMI-shaped container image for the test cluster, and the `singularity` that runs it.

LUMI's PyTorch comes in Singularity images (LAIF: `singularity run IMAGE cmd ...`) whose
Python has torch but not scaletrain; users add their packages in a venv made inside the image
(docs/site-lumi.md). Jobs generated for such a site only really run if something runs images
here: singularity.py does, on bubblewrap. This module builds the image for it, once per
machine in about a second, without copying torch's gigabytes: a squashfs file (a .sif
stand-in; Singularity runs squashfs images too) that holds

- /opt/conda, the image's Python, first on its PATH: this interpreter as an installation of
  its own (module_stack.py's way), whose site-packages links every package of the test venv
  but scaletrain to /opt/conda/packages, where the test venv's site-packages is bound
  read-only; the packages' commands (torchrun, accelerate, pip, ...) in /opt/conda/bin;
- /.singularity.d/runscript, LAIF's: ROCR_VISIBLE_DEVICES=$SLURM_LOCALID when
  ROCR_USE_SLURM_LOCALID=1, then the command;
- /.singularity.d/stand-in.json: the image's environment, and the host folders it needs
  (this interpreter's installation at its own path, the site-packages at /opt/conda/packages).

`write_commands` puts `singularity` and `apptainer` in a folder for PATH: the test cluster's
bin/, where jobs find them as they find sbatch.
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tests.conftest import REPO, clean_environ
from tests.support import singularity
from tests.support.module_stack import build_once, machine_folder, write_python_prefix

IMAGE_NAME = "lumi-multitorch-standin.sif"
IMAGE_PYTHON = PurePosixPath("/opt/conda")
"""The prefix of the image's Python (bin/python3)."""
PACKAGES = IMAGE_PYTHON / "packages"
"""Where the test venv's site-packages is bound inside."""
# Left out of the image, as LAIF images have no scaletrain: its metadata and editable install.
HIDDEN = ("scaletrain", "__editable__.scaletrain", "__editable___scaletrain")
RUNSCRIPT = """\
#!/bin/sh
# `singularity run IMAGE cmd ...` runs this, as LUMI AI Factory images do: with
# ROCR_USE_SLURM_LOCALID=1 each Slurm task sees only the GPU of its local rank.
if [ "${ROCR_USE_SLURM_LOCALID:-}" = 1 ] && [ -n "${SLURM_LOCALID:-}" ]; then
    export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"
fi
exec "$@"
"""
REQUIRED = {"bwrap": "bubblewrap", "squashfuse": "squashfuse", "mksquashfs": "squashfs-tools"}
# Bump when the image's layout changes: sessions then build a new one beside the old.
_LAYOUT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ContainerImage:
    """The image file and the commands that run it."""

    path: Path
    """The image (`singularity run <path> cmd ...`, `--container <path>`)."""
    commands: Path
    """A folder with `singularity` and `apptainer`."""

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: the tests' clean environment) with the commands first on PATH."""
        environ = dict(base if base is not None else clean_environ())
        return {**environ, "PATH": f"{self.commands}:{environ['PATH']}"}


def build_image() -> ContainerImage:
    """The image for this test venv: built once per machine in a folder of the temporary
    directory (anew when the venv's packages change), reused by later sessions."""
    missing = [package for command, package in REQUIRED.items() if not shutil.which(command)]
    if missing:
        raise RuntimeError(
            f"cannot build the test container image: {', '.join(missing)} not installed. "
            "Run `bash scripts/install-slurm.sh` as root (scripts/test.sh does)."
        )
    purelib = Path(sysconfig.get_paths()["purelib"])
    contents = sorted(entry.name for entry in purelib.iterdir())
    key = f"{sys.prefix}{_LAYOUT_VERSION}{contents}"
    folder = machine_folder("scaletrain-container", key)
    build_once(folder, lambda building: _write_image(building, purelib))
    return ContainerImage(path=folder / IMAGE_NAME, commands=folder / "bin")


def write_commands(folder: Path) -> None:
    """`singularity` and `apptainer` in `folder`: singularity.py, run by this interpreter
    in isolated mode (it needs the standard library only)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = Path(singularity.__file__)
    for name in ("singularity", "apptainer"):
        command = folder / name
        command.write_text(
            f"#!/bin/sh\n# {name} for the test cluster: Singularity's command line on bubblewrap.\n"
            f'exec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(script))} "$@"\n'
        )
        command.chmod(0o755)


def make_image_venv(image: ContainerImage, folder: Path) -> Path:
    """A venv made inside the image as docs/site-lumi.md says (`--system-site-packages`),
    with scaletrain installed from a copy of this checkout; `<venv>/bin` first on the
    container's PATH (SINGULARITYENV_PREPEND_PATH) makes its python3 the job's.

    --without-pip and the image's pip save ensurepip's ~15 s; --no-index and no build
    isolation: the image has every dependency and build tool, nothing is downloaded."""
    venv, source = folder / "venv", folder / "scaletrain-source"
    folder.mkdir(parents=True, exist_ok=True)
    # A copy: pip builds in the source folder, and the shared checkout stays untouched.
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, source / name)
    run = ["singularity", "exec", str(image.path)]
    steps = [
        [*run, "python3", "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        [*run, f"{venv}/bin/python3", "-m", "pip", "install", "--quiet", "--no-index",
         "--no-build-isolation", str(source)],
    ]  # fmt: skip
    for step in steps:
        result = subprocess.run(
            step, env=image.environ(), cwd=folder, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{shlex.join(step)}:\n{result.stdout}{result.stderr}"
    shutil.rmtree(source)
    return venv


def _write_image(folder: Path, purelib: Path) -> None:
    """The image file and the commands in `folder`."""
    root = folder / "root"
    prefix = root / IMAGE_PYTHON.relative_to("/")
    packages = write_python_prefix(prefix)
    (root / PACKAGES.relative_to("/")).mkdir()
    for entry in sorted(purelib.iterdir()):
        if not entry.name.startswith(HIDDEN):
            (packages / entry.name).symlink_to(PACKAGES / entry.name)
    _write_package_commands(prefix / "bin", purelib)
    metadata = root / ".singularity.d"
    (metadata / "libs").mkdir(parents=True)
    (metadata / "runscript").write_text(RUNSCRIPT)
    (metadata / "runscript").chmod(0o755)
    (root / singularity.METADATA).write_text(
        json.dumps(
            {
                "environment": {"PATH": f"{IMAGE_PYTHON}/bin:{singularity.DEFAULT_PATH}"},
                "host_folders": [[sys.base_prefix, sys.base_prefix], [str(purelib), str(PACKAGES)]],
            },
            indent=2,
        )
    )
    squash = ["mksquashfs", str(root), str(folder / IMAGE_NAME), "-noappend", "-quiet"]
    squash += ["-no-progress", "-all-root", "-no-xattrs"]
    subprocess.run(squash, check=True, capture_output=True, timeout=300)
    shutil.rmtree(root)
    write_commands(folder / "bin")


def _write_package_commands(folder: Path, purelib: Path) -> None:
    """The packages' console scripts (torchrun, accelerate, pip, ...) for the image's
    Python, as pip would have written them in the image."""
    python = IMAGE_PYTHON / "bin" / "python3"
    for distribution in importlib.metadata.distributions(path=[str(purelib)]):
        if distribution.metadata["Name"].startswith(HIDDEN):
            continue
        for entry in distribution.entry_points.select(group="console_scripts"):
            if not entry.attr:
                continue
            script = folder / entry.name
            script.write_text(
                f"#!{python}\nimport sys\nfrom {entry.module} import {entry.attr.split('.')[0]}\n"
                f"sys.exit({entry.attr}())\n"
            )
            script.chmod(0o755)
