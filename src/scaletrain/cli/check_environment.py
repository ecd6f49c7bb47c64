"""`scaletrain check --cluster C`: on a login node, set up the job's software as its job would
(module lines and venv, or the container) and check that its Python imports torch, the
launcher, your script's imports and scaletrain for its own checks. Fails in seconds, naming
the fix; a name that may be a module of yours, or scaletrain alone missing, is a warning."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from scaletrain.clusters.catalog import load_profile
from scaletrain.core import console
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.environment_check import TOOLS_MISSING_STATUS, import_check
from scaletrain.launch.job_programs import write_job_programs
from scaletrain.launch.job_script import render_environment_check
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.planning.script_facts import ScriptFacts, read_script_facts
from scaletrain.planning.software import NO_VENV, SoftwareChoice, submitting_venv

# Module loads and a container's first start can take a while on a busy login node.
_CHECK_TIMEOUT_S = 600


def check_job_environment(
    cluster: str,
    *,
    script: str | None,
    mode: str,
    choice: SoftwareChoice,
    environ: dict[str, str],
) -> int:
    """Run the check; its exit code (0: the job's Python has everything)."""
    workdir = Path.cwd()
    facts = read_script_facts(workdir / script) if script else ScriptFacts()
    request = Request(
        cluster=cluster,
        script=script or "train.py",
        time="1:00:00",
        gpus_per_node=1,
        nodes=1,
        mode=mode,
        software=choice,
        script_facts=facts,
    )
    plan = plan_job(request, load_profile(cluster, environ))
    check = import_check(plan, facts, checks_script=True, runs_tools=True, instrumented=False)
    software = plan.software
    where = software.container_image or "; ".join(software.setup) or "this shell's PATH"
    packages = software.squashfs or software.venv or "no venv"
    wanted = [*check.needed, *check.perhaps_yours, *check.tools]
    console.info(f"the job's Python on {cluster}: {where}, {packages}; needs {', '.join(wanted)}")
    with tempfile.TemporaryDirectory(prefix="scaletrain-check-") as folder:
        programs = RunFolder(Path(folder))
        write_job_programs(programs.programs)
        result = subprocess.run(
            ["bash", "-c", render_environment_check(plan, workdir, programs)],
            env=environ,
            timeout=_CHECK_TIMEOUT_S,
            check=False,
        )
    if result.returncode == TOOLS_MISSING_STATUS:
        console.warning("jobs of this software would train without scaletrain's own checks")
        return 0
    if result.returncode == 0:
        console.success(f"the job's Python imports {', '.join([*check.needed, *check.tools])}")
    return result.returncode


def software_choice(
    stack: str | None, container: str | None, venv: str | None, environ: dict[str, str]
) -> SoftwareChoice:
    """The same software choice `submit` would make from these options."""
    chosen = venv if venv in (None, NO_VENV) else str(Path(venv).expanduser().absolute())
    return SoftwareChoice(
        stack=stack,
        container_image=container,
        venv=chosen,
        submitting_venv=submitting_venv(environ),
    )
