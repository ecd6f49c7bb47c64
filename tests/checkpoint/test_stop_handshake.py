"""The files a job script reads and writes, and what login-node tools may import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scaletrain.checkpoint.manifest import Position
from scaletrain.checkpoint.stop import clear_stop_files, record_resume, write_stopped
from scaletrain.core.run_folder import RunFolder


def test_stopped_json_is_what_the_job_script_reads_and_a_restart_clears_it(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run").create()
    folder.stop_request.write_text("USR1\n")
    checkpoint = folder.checkpoints / "step-0000120"
    write_stopped(
        folder, position=Position(step=120, epoch=2), reason="stop-requested", checkpoint=checkpoint
    )
    stopped = json.loads(folder.stopped_marker.read_text())
    assert {key: stopped[key] for key in ("step", "epoch", "reason", "checkpoint")} == {
        "step": 120,
        "epoch": 2,
        "reason": "stop-requested",
        "checkpoint": str(checkpoint),
    }
    assert clear_stop_files(folder) == stopped
    assert not folder.stop_request.exists() and not folder.stopped_marker.exists()
    assert clear_stop_files(folder) is None  # a start without a previous stop


def test_each_resume_is_one_line_with_slurms_restart_count(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run").create()
    for count in ("1", "2"):
        record_resume(
            folder,
            checkpoint=folder.checkpoints / "step-0000120",
            position=Position(step=120, epoch=2, batches_in_epoch=5),
            world_size=8,
            saved_world_size=16,
            previous_stop={"reason": "stop-requested"},
            environ={"SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": count},
        )
    lines = [json.loads(line) for line in folder.resumes.read_text().splitlines()]
    assert [line["slurm_restart_count"] for line in lines] == [1, 2]
    assert lines[0]["slurm_job_id"] == "4242" and lines[0]["after_stop"] == "stop-requested"
    assert (lines[0]["world_size"], lines[0]["saved_world_size"], lines[0]["step"]) == (8, 16, 120)
    assert "elastic_restart_count" not in lines[0]  # not under torchrun


def test_checkpoint_files_can_be_read_without_torch() -> None:
    probe = (
        "import sys; import scaletrain.checkpoint.layout, scaletrain.checkpoint.manifest, "
        "scaletrain.checkpoint.schedule, "
        "scaletrain.checkpoint.stop; print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
