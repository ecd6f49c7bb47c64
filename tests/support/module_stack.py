"""The test cluster's software, as the sites provide it: Lmod with a `pytorch` module, and
LUMI's container bindings module.

`module load pytorch` puts a separate Python first on PATH that has torch (and accelerate,
DeepSpeed, Lightning) but not scaletrain, as CSC's and LUMI's modules do: a job that loads
the module and nothing else cannot import scaletrain or your packages. Users add them with a
venv made over the module (`python3 -m venv --system-site-packages`), docs/site-puhti-mahti.md.

Built in about a second, without copying packages: the module's Python is this interpreter's
binary in a prefix of its own, with the standard library linked in and the test venv's
packages on its path, but not scaletrain (installed there in editable mode, which a path
line does not activate). (A venv would not do: a venv made from a venv's python with
--system-site-packages sees the base interpreter's packages, not the venv's.)

`module load lumi-aif-singularity-bindings` sets SINGULARITY_BIND as LUMI's module does (jobs
append their own binds to it): here to one harmless folder of its own, read-only at
SITE_BINDINGS in the container, which tests look for (container.py runs the containers).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
MODULE_NAME = "pytorch"
BINDINGS_MODULE = "lumi-aif-singularity-bindings"
SITE_BINDINGS = "/appl/local/laifs/bindings"
"""Where the bindings module's folder appears inside containers (read-only)."""
BINDINGS_MARKER = "bound-by-lumi-aif-singularity-bindings"
"""A file in that folder, for tests that check the module's bind."""
# Bump when the module's layout changes: sessions then build a new one beside the old.
_LAYOUT_VERSION = 2


@dataclass(frozen=True, slots=True)
class ModuleStack:
    modulefiles: Path
    """MODULEPATH: holds pytorch.lua and lumi-aif-singularity-bindings.lua."""
    python_env: Path
    """The prefix whose bin/python3 the module puts first on PATH."""

    def login_environ(self, base: dict[str, str]) -> dict[str, str]:
        """`base` as a login shell on a site sees it: Lmod's `module` function (exported, as
        sbatch passes it on to jobs) and MODULEPATH with the test cluster's modules."""
        script = f"source {LMOD_INIT} && export -f module && env -0"
        result = subprocess.run(
            ["bash", "-c", script],
            env={**base, "MODULEPATH": str(self.modulefiles)},
            capture_output=True,
            check=True,
            timeout=60,
        )
        pairs = (item.split(b"=", 1) for item in result.stdout.split(b"\0") if b"=" in item)
        return {name.decode(): value.decode() for name, value in pairs}


def build_module_stack() -> ModuleStack:
    """The `pytorch` module and its Python environment, for this test venv: built once per
    machine in a folder of the temporary directory, reused by later sessions (DeepSpeed's
    compiled CPU ops, kept in the module's TORCH_EXTENSIONS_DIR, stay valid with it)."""
    if not LMOD_INIT.is_file():
        raise RuntimeError(
            f"Lmod is not installed ({LMOD_INIT} is missing). "
            "Run `bash scripts/install-slurm.sh` as root (scripts/test.sh does)."
        )
    folder = machine_folder("scaletrain-pytorch-module", f"{sys.prefix}{_LAYOUT_VERSION}")
    if build_once(folder, lambda building: _write_module(building, final=folder)):
        _compile_deepspeed_op(folder)
    return ModuleStack(modulefiles=folder / "modulefiles", python_env=folder / "pytorch-env")


def machine_folder(prefix: str, key: str) -> Path:
    """A folder of the temporary directory named after `key`: what is built there once per
    machine is reused by later sessions (a new key builds anew beside it)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"{prefix}-{digest}"


def build_once(folder: Path, write: Callable[[Path], None]) -> bool:
    """Unless `folder` exists: `write` into a folder beside it, then rename that to `folder`
    (atomic, so a folder that exists is whole); whether this call built it."""
    if folder.is_dir():
        return False
    building = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=folder.parent))
    try:
        write(building)
        building.rename(folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        if folder.is_dir():  # another session finished first: use that one
            return False
        raise
    return True


def _compile_deepspeed_op(folder: Path) -> None:
    """DeepSpeed on CPUs compiles its shared-memory communication op on first use (about a
    minute): done here once, outside any job's time limit, where the module's jobs find it."""
    code = "from deepspeed.ops.op_builder.cpu.comm import ShareMemCommBuilder as B; B().load()"
    environ = {**os.environ, "TORCH_EXTENSIONS_DIR": str(folder / "torch-extensions")}
    python = folder / "pytorch-env" / "bin" / "python3"
    subprocess.run(
        [str(python), "-c", code], env=environ, capture_output=True, timeout=900, check=False
    )


def write_python_prefix(prefix: Path) -> Path:
    """A Python installation in `prefix` made of this interpreter (its binary copied, its
    standard library linked); its site-packages folder, empty, for the caller to fill."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    library = prefix / "lib" / version
    packages = library / "site-packages"
    packages.mkdir(parents=True)
    (prefix / "bin").mkdir()
    # A copy, not a link: Python finds its prefix next to the executable's real path.
    shutil.copy2(Path(sys.base_prefix) / "bin" / version, prefix / "bin" / version)
    for name in ("python3", "python"):
        (prefix / "bin" / name).symlink_to(version)
    # C headers: DeepSpeed compiles its CPU ops against them when a job first uses them.
    (prefix / "include").symlink_to(Path(sys.base_prefix) / "include")
    for entry in stdlib.iterdir():
        if entry.name != "site-packages":
            (library / entry.name).symlink_to(entry)
    return packages


def _write_module(folder: Path, *, final: Path) -> None:
    """The environment and the modulefiles in `folder`, naming paths as they will be in `final`."""
    packages = write_python_prefix(folder / "pytorch-env")
    # The test venv's packages by their own path (a path line in a .pth file; the .pth files
    # in that folder, scaletrain's editable install among them, are not read from there). Their
    # own path keeps compiled-extension caches valid: DeepSpeed's JIT ops hash their paths.
    (packages / "test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    modulefiles = folder / "modulefiles"
    modulefiles.mkdir()
    (modulefiles / f"{MODULE_NAME}.lua").write_text(
        "-- PyTorch for the test cluster: a Python with torch first on PATH, as the sites'\n"
        "-- modules provide it (no scaletrain: users add it in a venv over this module).\n"
        'whatis("PyTorch, accelerate, DeepSpeed, Lightning (test cluster)")\n'
        f'prepend_path("PATH", "{final / "pytorch-env" / "bin"}")\n'
        f'setenv("TORCH_EXTENSIONS_DIR", "{final / "torch-extensions"}")\n'
    )
    bindings = folder / "container-bindings"
    bindings.mkdir()
    (bindings / BINDINGS_MARKER).write_text(f"bound at {SITE_BINDINGS} by {BINDINGS_MODULE}\n")
    (modulefiles / f"{BINDINGS_MODULE}.lua").write_text(
        "-- What containers bind from the host, as LUMI's module of this name sets it (there:\n"
        "-- host files the image needs; here one read-only folder that tests look for).\n"
        'whatis("SINGULARITY_BIND for LUMI AI Factory containers (test cluster)")\n'
        f'setenv("SINGULARITY_BIND", "{final / bindings.name}:{SITE_BINDINGS}:ro")\n'
    )


def make_user_venv(stack: ModuleStack, folder: Path) -> Path:
    """A venv over the module, made as docs/site-puhti-mahti.md says, with scaletrain
    installed from this checkout; its bin/scaletrain submits jobs."""
    venv = folder / "venv"
    login = stack.login_environ({"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]})
    # pip of the module's Python (--without-pip saves ~15 s of ensurepip on a loaded machine);
    # no build isolation: the module has the build tools, and nothing is downloaded.
    script = (
        f"module load {MODULE_NAME} && python3 -m venv --system-site-packages --without-pip "
        f"{venv} && source {venv}/bin/activate && python3 -m pip install --quiet --no-deps "
        f"--no-build-isolation -e {REPO}"
    )
    subprocess.run(["bash", "-c", script], env=login, check=True, timeout=300)
    return venv
