"""A rehearsal's job script (`submit --rehearse`, templates/rehearsal.j2) and what `submit`
says and prints for it before anything is queued; the rehearsal on the test Slurm is in
test_rehearsal_on_slurm.py."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.launch.job_script import JobOptions
from scaletrain.planning.modes import launch_modes
from tests.conftest import clean_environ, scaletrain
from tests.support.job_scripts import WORKDIR, plan_for, render, shellcheck


def rehearsal_script(mode: str = "srun", **more: object) -> str:
    plan = plan_for(cluster="puhti", gpus=8, mode=mode, partition="gputest", time="15:00")
    return render(plan, rehearsal_steps=10, max_restarts=0, requeue=False, **more)


def test_a_rehearsal_trains_until_the_stop_margin_and_passes_or_fails_by_its_exit() -> None:
    script = rehearsal_script()
    assert "export SCALETRAIN_REHEARSAL_STEPS=10\n" in script
    assert "job_started=$(($(date +%s) - SECONDS))\n" in script
    assert 'export SCALETRAIN_JOB_STARTED="$job_started"\n' in script
    # 15 minutes less the stop margin of a short job (a fifth: 180 s), counted from the start.
    assert "rehearsal_left=$((720 - SECONDS))\n" in script
    joined = re.sub(r" \\\n\s*", " ", script)  # continuation lines joined
    assert (
        'timeout --kill-after=30 "$rehearsal_left" srun --kill-on-bad-exit=1 bash -c "$in_task" '
        "task python3 -u train.py &\n"
    ) in joined
    # Reaching its end without an error is a pass (exit 0 for --dependency=afterok).
    verdict = script[script.index("# The verdict") :]
    assert "if ((status == 124)); then" in verdict and "status=0" in verdict
    # Saved, resumed and stopped for the rehearsal: its report is newer than the job.
    assert 'if [[ "$run_dir/metrics/rehearsal.json" -nt "$0" ]]; then' in verdict
    assert 'exit "$status"' in verdict
    # Never requeued, never restarted: a failure, a hang too, must end it.
    assert "#SBATCH --requeue" not in script and "scontrol requeue" not in script
    assert "scaletrain: rehearsal failed: training hung (see above)" in script


def test_a_real_job_has_no_rehearsal_part() -> None:
    plan = plan_for(cluster="puhti", gpus=8, mode="srun")
    script = render(plan)
    assert "REHEARSAL" not in script and "timeout " not in script


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_rehearsals_of_every_mode_pass_shellcheck(tmp_path: Path) -> None:
    scripts = {mode: rehearsal_script(mode) for mode in launch_modes()}
    assert shellcheck(scripts, tmp_path) == ""


def test_rehearsal_steps_must_be_positive() -> None:
    with pytest.raises(ScaletrainError, match="--rehearsal-steps 0 is not a positive number"):
        JobOptions(workdir=WORKDIR, rehearsal_steps=0)


def test_submit_says_what_the_rehearsal_does_and_prints_both_scripts(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import scaletrain as st\nckpt = st.Checkpointer(model=m)\n")
    environ = clean_environ(
        PATH=str(Path(sys.executable).parent), COLUMNS="250", XDG_CONFIG_HOME=str(tmp_path / "c")
    )
    options = ["-c", "puhti", "--gpus", "16", "-t", "12:00:00", "--name", "big"]
    result = scaletrain(
        "submit", *options, "--rehearse", "--dry-run", "train.py", cwd=tmp_path, environ=environ
    )
    assert result.returncode == 0, result.stderr
    assert (
        "  rehearsal     2 node(s) × 4 on gputest first (0:15:00, at most 156 GPU BU): 10 "
        "steps, a checkpoint saved and "
        "resumed, 10 more (st.Checkpointer), or training until 0:12:00; the real job starts "
        "only if it passes\n"
        "                scaled down from 4 node(s) × 4 to 2 × 4: gputest takes at most 2 "
        "node(s), 8 GPUs\n"
    ) in result.stderr
    rehearsal, real = result.stdout.split("#!/bin/bash\n")[1:]
    assert "#SBATCH --job-name=big-rehearsal\n#SBATCH --partition=gputest\n" in rehearsal
    assert "#SBATCH --time=0:15:00\n" in rehearsal and "SCALETRAIN_REHEARSAL_STEPS" in rehearsal
    assert "#SBATCH --job-name=big\n#SBATCH --partition=gpu\n#SBATCH --nodes=4\n" in real
    assert "SCALETRAIN_REHEARSAL_STEPS" not in real
    assert not (tmp_path / "runs").exists()
    # A script without st.Checkpointer rehearses by training until the end, without an error.
    (tmp_path / "train.py").write_text("import torch\n")
    result = scaletrain(
        "submit", *options, "--rehearse", "--dry-run", "train.py", cwd=tmp_path, environ=environ
    )
    assert "training until 0:12:00 without an error (no st.Checkpointer to rehearse)" in (
        result.stderr
    )
