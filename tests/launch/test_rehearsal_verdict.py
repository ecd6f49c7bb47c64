"""What `scaletrain status` calls a rehearsal: Slurm's state while Slurm knows the job, the job
script's own verdict line once it forgot it, and a real job cancelled because of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.launch.rehearsal_verdict import (
    FAILED_LINE,
    PASSED_LINE,
    cancelled_by_its_rehearsal,
    rehearsal_verdict,
)
from scaletrain.slurm.output import JobInfo

TEMPLATES = Path(__file__).parents[2] / "src" / "scaletrain" / "launch" / "templates"


def job(state: str, reason: str = "") -> JobInfo:
    return JobInfo(
        job_id="12",
        name="rehearsal",
        state=state,
        reason=reason,
        elapsed="0:01:00",
        time_limit="0:10:00",
        num_nodes=1,
        nodelist="n1",
        restarts=0,
        exit_code="0:0",
    )


@pytest.mark.parametrize(
    ("state", "verdict"),
    [("PENDING", "running"), ("RUNNING", "running"), ("COMPLETED", "passed"),
     ("FAILED", "failed"), ("CANCELLED", "failed"), ("TIMEOUT", "failed")],
)  # fmt: skip
def test_slurms_state_decides_while_slurm_knows_the_job(
    tmp_path: Path, state: str, verdict: str
) -> None:
    log = tmp_path / "rehearsal.out"
    log.write_text(f"{PASSED_LINE}: 5 steps\n")  # Slurm's word wins over the output
    assert rehearsal_verdict(job(state), log) == verdict


def test_the_job_scripts_verdict_line_decides_once_slurm_forgot_the_job(tmp_path: Path) -> None:
    log = tmp_path / "rehearsal.out"
    log.write_text("step 1\nscaletrain: rehearsal passed: 5 steps, a checkpoint saved\n")
    assert rehearsal_verdict(None, log) == "passed"
    log.write_text("Traceback\nscaletrain: rehearsal failed (exit status 1, see above)\n")
    assert rehearsal_verdict(None, log) == "failed"
    log.write_text("step 1\n")
    assert rehearsal_verdict(None, log) == "unknown"
    assert rehearsal_verdict(None, None) == "unknown"


def test_the_verdict_lines_are_the_ones_the_job_scripts_print() -> None:
    rehearsal = (TEMPLATES / "rehearsal.j2").read_text()
    assert f'echo "{PASSED_LINE}: ' in rehearsal and f'echo "{FAILED_LINE} ' in rehearsal
    assert f'echo "{FAILED_LINE}: training hung' in (TEMPLATES / "hang.j2").read_text()


def test_a_real_job_cancelled_for_a_dependency_never_met_was_cancelled_by_its_rehearsal() -> None:
    assert cancelled_by_its_rehearsal(job("CANCELLED", "DependencyNeverSatisfied"))
    assert not cancelled_by_its_rehearsal(job("CANCELLED", ""))  # by the user
    assert not cancelled_by_its_rehearsal(job("PENDING", "DependencyNeverSatisfied"))
    assert not cancelled_by_its_rehearsal(None)
