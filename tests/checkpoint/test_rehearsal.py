"""A rehearsal inside the training processes (SCALETRAIN_REHEARSAL_STEPS, set by jobs of
`submit --rehearse`): N steps, a save, that checkpoint loaded back through the Checkpointer's
resume path, N more steps, a clean stop; and its weights are those of a run never resumed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from scaletrain.checkpoint.rehearsal import Rehearsal
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from tests.checkpoint.conftest import run_args
from tests.conftest import clean_environ, scaletrain

# 256 samples in global batches of 16: 16 steps per epoch, 3 epochs.
WORKER_ARGS = ("--epochs", "3", "--step-seconds", "0.05")


def model_at(run: RunFolder, step: int) -> dict[str, torch.Tensor]:
    """The model's weights in the run's checkpoint of `step` (DCP, read without a group)."""
    converted = run.root / f"step-{step}.pt"
    dcp_to_torch_save(run.checkpoints / f"step-{step:07d}", converted)
    state: dict[str, torch.Tensor] = torch.load(converted, weights_only=False)["model"]
    return state


@pytest.mark.multiprocess
def test_a_rehearsal_saves_resumes_and_stops_with_a_straight_runs_weights(
    tmp_path: Path,
) -> None:
    started = int(time.time())
    environ = clean_environ(SCALETRAIN_REHEARSAL_STEPS="3", SCALETRAIN_JOB_STARTED=str(started))
    rehearsed = scaletrain(*run_args("rehearsal", *WORKER_ARGS), cwd=tmp_path, environ=environ)
    assert rehearsed.returncode == 0, rehearsed.stderr
    run = RunFolder(tmp_path / "runs" / "rehearsal")
    assert "stopped at step 6 (rehearsal)" in rehearsed.stderr
    stopped = json.loads(run.stopped_marker.read_text())
    assert (stopped["step"], stopped["reason"]) == (6, "rehearsal")
    (resume,) = [json.loads(line) for line in run.resumes.read_text().splitlines()]
    assert (resume["step"], resume["checkpoint"]) == (3, str(run.checkpoints / "step-0000003"))
    report = json.loads(run.rehearsal_report.read_text())
    assert len(report["step_ends"]) == 6 and report["step_ends"][0] > started
    assert (report["steps"], report["world_size"], report["job_started"]) == (3, 2, started)
    assert (report["total_steps"], report["samples_per_step"]) == (48, 16)
    assert report["weights_came_back"] is True and report["save_s"] > 0 and report["load_s"] > 0
    assert len(report["peak_memory_gb"]) == 2

    straight = scaletrain(
        *run_args("straight", *WORKER_ARGS, "--every-steps", "6", "--keep", "20"),
        cwd=tmp_path,
        environ=clean_environ(),
    )
    assert straight.returncode == 0, straight.stderr
    expected, resumed = model_at(RunFolder(tmp_path / "runs" / "straight"), 6), model_at(run, 6)
    assert expected and expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)


def test_weights_that_do_not_come_back_fail_the_rehearsal() -> None:
    model = torch.nn.Linear(2, 2)
    rehearsal = Rehearsal(steps=3)

    def resume() -> None:  # a load that brings back other values
        with torch.no_grad():
            model.weight.add_(1.0)

    with pytest.raises(ScaletrainError, match="did not load back the weights it saved"):
        rehearsal.save_and_resume(model, save=lambda: None, resume=resume)
    assert rehearsal.weights_came_back is False


def test_only_a_positive_number_of_steps_is_a_rehearsal() -> None:
    assert Rehearsal.from_environ({}) is None
    with pytest.raises(ScaletrainError, match="SCALETRAIN_REHEARSAL_STEPS='ten' is not"):
        Rehearsal.from_environ({"SCALETRAIN_REHEARSAL_STEPS": "ten"})
    found = Rehearsal.from_environ({"SCALETRAIN_REHEARSAL_STEPS": "2"})
    assert found is not None and [found.at_step(step) for step in (1, 2, 3, 4)] == [
        None, "resume", None, "stop",
    ]  # fmt: skip
