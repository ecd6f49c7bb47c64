"""Jobs on the test Slurm as on today's sites: the `pytorch` Lmod module gives torch but not
scaletrain, the user's venv over it (made as docs/site-puhti-mahti.md says) gives the rest, and
scripts that were never converted run in every launch mode with what their own launcher gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from tests.conftest import WORKERS
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import finished, job_environ, reports, submit, submit_options

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]

MODES = ("torchrun", "srun", "accelerate", "deepspeed", "lightning")


def test_a_plain_torch_distributed_script_runs_unchanged_in_every_mode(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """init_process_group("gloo") with env://, LOCAL_RANK from the environment, no scaletrain:
    in every mode on 2 nodes, one process each (local ranks above 0: test_jobs_on_slurm.py).
    All jobs are queued at once, so that the cluster runs them side by side."""
    jobs: dict[str, tuple[RunFolder, str, Path]] = {}
    for mode in MODES:
        probe = tmp_path / mode
        probe.mkdir()
        environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(probe))
        options = submit_options(f"plain-{mode}", mode, 2, 1)
        folder, job_id = submit(
            slurm_cluster, tmp_path, environ, options, str(WORKERS / "unconverted_ddp.py")
        )
        jobs[mode] = (folder, job_id, probe)
    for mode, (folder, job_id, probe) in jobs.items():
        output = finished(slurm_cluster, folder, job_id)
        ranks = reports(probe, "rank-*.json")
        assert [(r["rank"], r["local_rank"], r["host"]) for r in ranks] == [
            (0, 0, "n1"), (1, 0, "n2"),
        ], (mode, output)  # fmt: skip
        for rank in ranks:
            assert rank["world_size"] == 2
            assert rank["weights"] == ranks[0]["weights"], mode  # gradients were averaged
            # Only deepspeed's own launcher passes --local_rank; the others leave it unset.
            expected = rank["local_rank"] if mode == "deepspeed" else -1
            assert rank["local_rank_argument"] == expected, mode
        # What the script prints under its own launcher: one line per rank.
        for rank in range(2):
            assert f"rank {rank}/2 local 0 on n{rank + 1}: loss" in output, mode
        # The preflight checked what the script reads, in the same launch line.
        preflight = json.loads((folder.report / "preflight.json").read_text())
        checks = {r["name"]: r["status"] for r in preflight["ranks"][0]["results"]}
        assert checks["script-variables"] == "ok", (mode, output)
        # A clean end on every node: no errors from the launcher after a successful run.
        for noise in ("exit barrier", "Traceback", "DistNetworkError"):
            assert noise not in output, (mode, output)


def test_without_the_venv_a_script_that_imports_scaletrain_stops_and_others_train(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The module's Python has torch but not scaletrain: a converted script cannot run there
    and stops before any task with the fix; an unconverted one trains without scaletrain's
    own checks, and the job says what it left out."""
    python = slurm_cluster.modules.python_env / "bin" / "python3"
    probe = tmp_path / "probe"
    probe.mkdir()
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(probe))
    converted = submit_options("no-venv", "srun", 2, 1, "--venv", "none")
    stopped = submit(slurm_cluster, tmp_path, environ, converted, str(WORKERS / "hello.py"))
    plain = submit_options("no-venv-plain", "srun", 2, 1, "--venv", "none")
    trained = submit(slurm_cluster, tmp_path, environ, plain, str(WORKERS / "unconverted_ddp.py"))
    folder, job_id = stopped
    state = slurm_cluster.wait_for_job(job_id)
    output = (folder.logs / f"{folder.name}-{job_id}.out").read_text()
    assert state == "FAILED", output
    assert f"scaletrain: the job's Python ({python}) cannot import scaletrain.\n" in output
    assert (
        "HINT: make a venv over the module once: module purge; module load pytorch; python3 -m"
        in (output)
    )
    # Stopped in the batch shell: no task was started.
    assert "preflight" not in output and "hello from rank" not in output
    output = finished(slurm_cluster, *trained)
    assert f"scaletrain: the job's Python ({python}) has no scaletrain: your script trains " in (
        output
    )
    assert "HINT: to have them, make a venv over the module once:" in output
    assert [r["rank"] for r in reports(probe, "rank-*.json")] == [0, 1]
    assert "Traceback" not in output
