"""Submitting generated jobs to the test Slurm the way a user does, and reading what they left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scaletrain.core.run_folder import RunFolder
from tests.conftest import REPO, scaletrain
from tests.support.slurm_cluster import SlurmCluster

EXAMPLE = REPO / "examples" / "mnist" / "train.py"
# A job has started, run and ended within this; a requeued one waits ~12 s more to restart.
JOB_TIMEOUT_S = 180


def job_environ(cluster: SlurmCluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's login shell on the test cluster: Lmod's `module` and the cluster's modules,
    Slurm's commands, and the user's venv over the `pytorch` module activated. Jobs load the
    module, then activate that venv (the one `scaletrain submit` runs from)."""
    base = cluster.environ(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        COLUMNS="200",
        # Rank 0 of a job may take this long to import torch on a loaded 2-core machine.
        SCALETRAIN_RENDEZVOUS_TIMEOUT="60",
        **extra,
    )
    environ = cluster.modules.login_environ(base)
    venv = cluster.user_venv
    environ["PATH"] = f"{cluster.bin}:{venv / 'bin'}:{base['PATH']}"
    environ["VIRTUAL_ENV"] = str(venv)
    return environ


def submit_options(
    name: str, mode: str, nodes: int, per_node: int, *more: str, cluster: str = "local"
) -> list[str]:
    """`scaletrain submit` options for a job of 10 minutes on the test cluster."""
    return ["-c", cluster, "-t", "10:00", "--name", name, "--mode", mode,
            "--nodes", str(nodes), "--gpus-per-node", str(per_node), *more]  # fmt: skip


def container_options(cluster: SlurmCluster) -> list[str]:
    """`scaletrain submit` options for a LUMI-shaped job: the cluster's image (run with the
    stand-in `singularity run` after the bindings module) and a venv made inside it. As on
    LUMI, the job binds only its folder and the run folder: the script must lie there."""
    return ["--container", str(cluster.container_image), "--venv", str(cluster.container_venv)]


def submit(
    cluster: SlurmCluster, cwd: Path, environ: dict[str, str], options: list[str], *command: str
) -> tuple[RunFolder, str]:
    """`scaletrain submit <options> <command>` from `cwd`, with the user's venv's scaletrain;
    the run folder and the job id."""
    result = scaletrain(
        "submit", *options, *command, cwd=cwd, environ=environ, venv=cluster.user_venv
    )
    assert result.returncode == 0, result.stderr
    name = options[options.index("--name") + 1]
    return RunFolder(cwd / "runs" / name), result.stdout.strip()


def finished(cluster: SlurmCluster, folder: RunFolder, job_id: str) -> str:
    """Wait for the job; its output, from the run folder's logs/ (named %x-%j.out)."""
    state = cluster.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = folder.logs / f"{folder.name}-{job_id}.out"
    assert output.is_file(), f"{state}: no {output}\n{cluster.logs()}"
    text = output.read_text()
    assert state == "COMPLETED", f"{state}\n{text}"
    return text


def reports(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """JSON reports written by the ranks or tasks, by rank."""
    found = [json.loads(path.read_text()) for path in folder.glob(pattern)]
    return sorted(found, key=lambda report: report.get("rank", 0))
