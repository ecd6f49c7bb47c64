"""Render job scripts in tests, and read their launch lines back."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import tomli_w

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.toml_text import parse_toml
from scaletrain.launch.job_script import JobOptions, render_job_script
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.planning.software import SoftwareChoice
from tests.conftest import REPO

# A value of a user's cluster profile ([environment]) that would run commands if unquoted.
HOSTILE_PROFILE_VALUE = "$(touch pwned14) `touch pwned15` it's"

# Where the rendered examples "run": a LUMI-like project folder.
WORKDIR = Path("/scratch/project_465000000/me")
RUN_FOLDER = RunFolder(WORKDIR / "runs" / "mnist")


_SOFTWARE = {"container_image", "stack", "venv", "squashfs", "binds", "setup", "submitting_venv"}
_EXTRAS = {"sbatch", "launcher_args", "before", "after", "precision", "extra_setup"}


def plan_for(**request: Any) -> Plan:
    """The plan of a request (script defaults to train.py) on its cluster's packaged profile;
    software and extras fields may be given flat (container_image=..., before=...)."""
    software = {key: request.pop(key) for key in _SOFTWARE & request.keys()}
    extras = {key: request.pop(key) for key in _EXTRAS & request.keys()}
    if "extra_setup" in extras:
        extras["setup"] = extras.pop("extra_setup")
    request["software"] = SoftwareChoice(**software)
    request["extras"] = JobExtras(**extras)
    request.setdefault("script", "train.py")
    request.setdefault("time", "2:00:00")
    decided = Request(**request)
    return plan_job(decided, load_profile(decided.cluster, {}))


def render(
    plan: Plan, folder: RunFolder = RUN_FOLDER, workdir: Path = WORKDIR, **options: Any
) -> str:
    """The job script of `plan`; restarts and requeue on, as for a script that resumes (the
    script in WORKDIR does not exist, so none would be read), unless `options` say otherwise."""
    options = {"max_restarts": 3, "requeue": True} | options
    return render_job_script(plan, folder, JobOptions(workdir=workdir, **options))


def launch_lines(script: str) -> list[str]:
    """Each `srun ...` command of the script as one line: continuations joined, `&` dropped."""
    joined = re.sub(r" \\\n\s*", " ", script)
    lines = [line.strip() for line in joined.splitlines()]
    starts = [line.removeprefix("if ! ") for line in lines if re.match(r"(if ! )?srun ", line)]
    return [line.removesuffix(" &") for line in starts]


def shellcheck(scripts: dict[str, str], folder: Path) -> str:
    """shellcheck's findings for each script (empty when all pass); files kept in `folder`."""
    paths = []
    for name, text in scripts.items():
        path = folder / f"{name}.sbatch"
        path.write_text(text)
        paths.append(str(path))
    result = subprocess.run(
        ["shellcheck", "--format=gcc", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr


def hostile_site(config_home: Path, accelerator: str = "cpu") -> None:
    """A user profile `hostile`: the test Slurm's (local.toml), exporting HOSTILE_VALUE, and
    without its Lmod module: its jobs run in plain bash too, with this venv's Python. Its
    nodes have GPUs of `accelerator` (cpu: CPU processes instead)."""
    profile = parse_toml((REPO / "src/scaletrain/clusters/profiles/local.toml").read_text())
    del profile["software"]
    profile["node"]["accelerator"] = accelerator
    profile["environment"] = {"HOSTILE_VALUE": HOSTILE_PROFILE_VALUE}
    text = tomli_w.dumps(profile)
    folder = config_home / "scaletrain" / "clusters"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hostile.toml").write_text(text)
