"""The graceful stop on the real test Slurm: USR1 -> checkpoint -> requeue -> resume, with a
worker doing the training's side and with the MNIST example's own checkpoints; continuing a run
under its name."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import read_job_events
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import (
    EXAMPLE,
    JOB_TIMEOUT_S,
    finished,
    job_environ,
    submit,
    submit_options,
)

pytestmark = pytest.mark.slurm

# graceful_stop.py stands for a script's side of the stop handshake, which a script with a
# Checkpointer has; `submit` cannot see that in it, so its jobs ask for requeue (--requeue).


def test_graceful_stop_requeues_and_the_rerun_continues(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The job script's side of the graceful-stop handshake, with a worker doing the training
    side: USR1 -> stop-requested -> stopped.json -> requeue -> the rerun with restart count 1."""
    environ = job_environ(slurm_cluster, tmp_path)
    options = submit_options("stopper", "srun", 1, 1, "--no-check", "--requeue")
    folder, job_id = submit(
        slurm_cluster, tmp_path, environ, options, str(WORKERS / "graceful_stop.py")
    )
    started = folder.root / "training-started"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not started.exists():
        assert time.monotonic() < deadline, slurm_cluster.logs()
        time.sleep(0.2)
    # What Slurm sends before the time limit (--signal=B:USR1@...), delivered now.
    slurm.cancel(job_id, environ=environ, signal="USR1", batch_only=True)
    output = finished(slurm_cluster, folder, job_id)
    assert (folder.root / "runs.txt").read_text().splitlines() == [
        "first run: stopped after a stop request: True",
        "restart 1: resumed and finished",
    ]
    events = read_job_events(folder)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", job_id), ("requeued", job_id),
    ]  # fmt: skip
    assert events[1].details == {"restart_count": 1}
    # One log for both runs (--open-mode=append): the first run's lines were kept.
    assert "USR1 received: asking training to checkpoint and stop" in output
    assert "requeueing job" in output and "stopped at step 7" in output
    status = json.loads(
        scaletrain("status", "--json", "stopper", cwd=tmp_path, environ=environ).stdout
    )
    assert (status["state"], status["restarts"]) == ("COMPLETED", 1)


def test_a_stop_marker_of_an_earlier_job_does_not_requeue(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # As a crash before the training could clear it would leave it.
    stale = tmp_path / "runs" / "stale" / "stopped.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"step": 3, "reason": "stop: SIGTERM"}))
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    options = submit_options("stale", "srun", 1, 1, "--no-check", "--requeue")
    folder, job_id = submit(
        slurm_cluster, tmp_path, environ, options, str(WORKERS / "task_probe.py")
    )
    output = finished(slurm_cluster, folder, job_id)
    assert "requeue" not in output
    assert [event.event for event in read_job_events(folder)] == ["submitted"]
    assert stale.is_file()  # left for the training to read and clear when it resumes


def test_a_run_continues_under_its_name_but_not_twice_at_once(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    environ = job_environ(
        slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path), PROBE_WAIT_FOR=str(release)
    )
    options = submit_options("again", "srun", 1, 1, "--no-check", "--requeue")
    probe = str(WORKERS / "task_probe.py")
    folder, first = submit(slurm_cluster, tmp_path, environ, options, probe)
    busy = scaletrain("submit", *options, probe, cwd=tmp_path, environ=environ)
    assert busy.returncode == 2
    assert f"Run 'again' still has job {first}" in busy.stderr
    assert "scaletrain cancel again" in busy.stderr
    release.touch()
    finished(slurm_cluster, folder, first)
    _, second = submit(slurm_cluster, tmp_path, environ, options, probe)
    finished(slurm_cluster, folder, second)
    submitted = [event.job_id for event in read_job_events(folder) if event.event == "submitted"]
    assert submitted == [first, second]
    assert sorted(path.name for path in folder.logs.iterdir()) == sorted(
        [f"again-{first}.out", f"again-{second}.out"]
    )


def final_weights(folder: RunFolder) -> dict[str, Any]:
    """The model's weights in the run's newest checkpoint (DCP, read without a process group)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    latest = folder.checkpoints / (folder.checkpoints / "LATEST").read_text().strip()
    converted = folder.root / "final.pt"
    dcp_to_torch_save(latest, converted)
    state = torch.load(converted, weights_only=False)
    return {name: value for name, value in state["model"].items()}


@pytest.mark.multiprocess
def test_mnist_stopped_before_its_time_limit_requeues_resumes_and_matches(
    slurm_cluster: SlurmCluster, tmp_path: Path, mnist_data: Path
) -> None:
    """Fault test 3: USR1 mid-run -> checkpoint, requeue, resume; the same weights as a run
    that was never interrupted. Needs the checkpoint runtime (st.Checkpointer in the example)."""
    pytest.importorskip("scaletrain.checkpoint", reason="no checkpoint runtime in this tree yet")
    import torch

    environ = job_environ(slurm_cluster, tmp_path)
    example = (str(EXAMPLE), "--data-dir", str(mnist_data), "--epochs", "16")
    runs = [
        submit(slurm_cluster, tmp_path, environ, submit_options(name, "srun", 2, 1, "--no-check"),
               *example)
        for name in ("straight", "stopped")
    ]  # fmt: skip
    (straight, straight_job), (stopped, stopped_job) = runs
    history = stopped.metrics / "train.jsonl"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (history.is_file() and len(history.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline, slurm_cluster.logs()
        time.sleep(0.2)
    # What Slurm sends before the time limit (--signal=B:USR1@...), delivered now.
    slurm.cancel(stopped_job, environ=environ, signal="USR1", batch_only=True)
    output = finished(slurm_cluster, stopped, stopped_job)
    finished(slurm_cluster, straight, straight_job)

    events = read_job_events(stopped)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", stopped_job), ("requeued", stopped_job),
    ], output  # fmt: skip
    resumes = [json.loads(line) for line in (stopped.root / "resumes.jsonl").open()]
    assert len(resumes) == 1, output
    assert resumes[0]["after_stop"] == "stop-requested"
    assert str(resumes[0]["slurm_restart_count"]) == "1"  # the requeued run saw it
    assert "USR1 received" in output and "requeueing job" in output
    expected, resumed = final_weights(straight), final_weights(stopped)
    assert expected and expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
