"""A recording stand-in for Slurm's commands, to run generated job scripts without Slurm.

`bash job.sbatch` with these first on PATH runs the script as a batch job would: each `srun`
line starts its task command once per task, all at once, with the variables Slurm gives a
task (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, ...; meanings from Slurm's srun manual),
and every call is appended to $FAKE_SLURM_LOG as a JSON line with its argv. The task
command is the script's own (bash -c "$in_task", torchrun, accelerate, python3), so the
tests see exactly the arguments a real srun would pass on. `batch_environment` gives the
variables sbatch sets in the batch shell, read from the script's own #SBATCH lines.

`sbatch --parsable` accepts any script and prints job id $FAKE_SLURM_JOB_ID (default 1234567)
without running it; `scontrol show job` and `sacct` answer as a Slurm without accounting that
has forgotten the job. Not a Slurm: one host, no resource limits, no CPU binding (recorded,
not applied). The real test Slurm (tests/support/slurm_cluster.py) runs the same scripts in
the slurm-marked tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import hostlist

# Every process this stand-in starts ends within this many seconds.
TASK_TIMEOUT_S = 120
COMMANDS = ("srun", "scontrol", "sbatch", "sacct")
DEFAULT_JOB_ID = "1234567"


def install(folder: Path, log: Path) -> dict[str, str]:
    """Write `srun` and `scontrol` into `folder`; the variables that put them on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for command in COMMANDS:
        path = folder / command
        path.write_text(
            f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {command} "$@"\n'
        )
        path.chmod(0o755)
    venv_bin = Path(sys.executable).parent
    path = f"{folder}:{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"PATH": path, "FAKE_SLURM_LOG": str(log)}


def batch_environment(script: str, *, job_id: int, nodelist: str) -> dict[str, str]:
    """What sbatch sets for the batch shell, from the script's #SBATCH lines."""
    options = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", script, re.MULTILINE))
    nodes = int(options.get("nodes", "1"))
    per_node = int(options.get("ntasks-per-node", "1"))
    return {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": options.get("job-name", "job"),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(nodes * per_node),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_CPUS_PER_TASK": options.get("cpus-per-task", "1"),
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_SUBMIT_DIR": str(Path.cwd()),
    }


def _record(command: str, argv: list[str], environ: Mapping[str, str]) -> None:
    with Path(environ["FAKE_SLURM_LOG"]).open("a", encoding="utf-8") as log:
        log.write(json.dumps({"command": command, "argv": argv}) + "\n")


def _task_environment(environ: Mapping[str, str], task: int, step: int) -> dict[str, str]:
    """A task's variables, as srun sets them (man srun, "OUTPUT ENVIRONMENT VARIABLES")."""
    hosts = list(hostlist.expand_hostlist(environ["SLURM_JOB_NODELIST"]))
    per_node = int(environ["SLURM_NTASKS_PER_NODE"])
    node = task // per_node
    return {
        **environ,
        "SLURM_STEP_ID": str(step),
        "SLURM_PROCID": str(task),  # the task's rank in the step, from 0
        "SLURM_LOCALID": str(task % per_node),  # its rank on its node, from 0
        "SLURM_NODEID": str(node),  # its node's index in the allocation, from 0
        "SLURM_STEP_NODELIST": environ["SLURM_JOB_NODELIST"],
        "SLURM_STEP_NUM_NODES": environ["SLURM_JOB_NUM_NODES"],
        "SLURM_STEP_NUM_TASKS": environ["SLURM_NTASKS"],
        "SLURM_STEP_TASKS_PER_NODE": environ["SLURM_TASKS_PER_NODE"],
        "SLURMD_NODENAME": hosts[min(node, len(hosts) - 1)],
    }


def srun(argv: list[str], environ: Mapping[str, str]) -> int:
    """Start the task command once per task of the job; its exit code (the first failure)."""
    _record("srun", argv, environ)
    options = 0
    while options < len(argv) and argv[options].startswith("-"):
        options += 1
    command = argv[options:]
    calls = Path(environ["FAKE_SLURM_LOG"]).read_text(encoding="utf-8").splitlines()
    step = sum(1 for line in calls if '"srun"' in line) - 1
    tasks = [
        subprocess.Popen(command, env=_task_environment(environ, task, step))
        for task in range(int(environ["SLURM_NTASKS"]))
    ]
    codes = [task.wait(timeout=TASK_TIMEOUT_S) for task in tasks]
    return next((code for code in codes if code != 0), 0)


def scontrol(argv: list[str], environ: Mapping[str, str]) -> int:
    """`show hostnames LIST` prints the hosts; `requeue ID` is recorded only; every job and
    partition is one the controller does not know."""
    _record("scontrol", argv, environ)
    argv = [word for word in argv if word not in ("--oneliner", "-o")]
    if argv[:2] == ["show", "hostnames"]:
        print("\n".join(hostlist.expand_hostlist(argv[2])))
        return 0
    if argv[:1] == ["requeue"]:
        return 0
    if argv[:2] == ["show", "job"]:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    if argv[:2] == ["show", "partition"]:
        print(f"Partition {argv[2:3]} not found", file=sys.stderr)
        return 1
    print(f"fake scontrol: {' '.join(argv)} is not implemented", file=sys.stderr)
    return 1


def sbatch(argv: list[str], environ: Mapping[str, str]) -> int:
    """Accept the job: print its id (`--parsable`), run nothing."""
    _record("sbatch", argv, environ)
    job_id = environ.get("FAKE_SLURM_JOB_ID", DEFAULT_JOB_ID)
    print(job_id if "--parsable" in argv else f"Submitted batch job {job_id}")
    return 0


def sacct(argv: list[str], environ: Mapping[str, str]) -> int:
    """A site without accounting, as the test Slurm."""
    _record("sacct", argv, environ)
    print("Slurm accounting storage is disabled", file=sys.stderr)
    return 1


if __name__ == "__main__":
    handlers = {"srun": srun, "scontrol": scontrol, "sbatch": sbatch, "sacct": sacct}
    sys.exit(handlers[sys.argv[1]](sys.argv[2:], os.environ))
