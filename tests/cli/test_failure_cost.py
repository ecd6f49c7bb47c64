"""`plan` and `submit` say what a hang or a lost node would cost the job."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import clean_environ, scaletrain


def said(tmp_path: Path, *options: str) -> str:
    (tmp_path / "train.py").touch()  # plan checks that the script exists
    result = scaletrain(
        "plan", "-c", "lumi", "--gpus", "16", "-t", "2:00:00", *options, "train.py",
        cwd=tmp_path, environ=clean_environ(COLUMNS="300"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())  # the plan is the result


def test_the_plan_says_what_a_failure_costs(tmp_path: Path) -> None:
    # 30 min of checkpoint interval at most + 10 min until the watchdog ends a hang, on
    # 2 LUMI nodes billed 8 GPU-hours per hour.
    assert (
        "lost work │ a hang or a lost node costs the work since the last checkpoint (the "
        "Checkpointer saves every 1-30 min, as often as costs ~2% of the time) + up to 0:10:00 "
        "until the watchdog ends a hang (--hang-limit): at most 0:40:00 = 5.33 GPU-hours, then "
        "the wait in the queue"
    ) in said(tmp_path, "--hang-limit", "600")
    assert "+ a hang runs until the collective's timeout (--hang-limit 0)" in said(
        tmp_path, "--hang-limit", "0"
    )
