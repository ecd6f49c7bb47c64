"""`scaletrain doctor` on a run folder whose training went silent: the ranks' heartbeats say
when they last finished a step and whether they ended."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scaletrain.core.rank_files import Phase, RankBeat, write_beat
from scaletrain.core.run_folder import RunFolder
from tests.conftest import scaletrain


def leave_heartbeats(folder: RunFolder, *, ago: timedelta, phase: Phase) -> None:
    moment = (datetime.now(timezone.utc) - ago).isoformat(timespec="milliseconds")
    for rank in (0, 1):
        beat = RankBeat(
            rank=rank, world_size=2, host="n1", pid=1000 + rank, pid_start=1, main_thread=1,
            step=154, phase=phase, last_step_time=moment, updated=moment,
        )  # fmt: skip
        write_beat(folder, beat)


def test_processes_that_stopped_stepping_without_ending_are_a_long_silence(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "quiet").create()
    leave_heartbeats(folder, ago=timedelta(hours=2, minutes=10), phase="loop")
    result = scaletrain("doctor", str(folder.root), cwd=tmp_path)
    assert result.returncode == 1
    said = " ".join(result.stdout.split())  # the findings are the result
    assert "long-silence: Training went silent: no step for a long time" in said
    assert "/ranks/:1: scaletrain heartbeat: no step for 2:10:0" in said
    # The silence and the last step, per rank where known (here: in no line).
    assert re.search(r"rank silent last \? 2:10:0\d 154", said)


def test_a_run_whose_processes_ended_is_not_silent(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "done").create()
    leave_heartbeats(folder, ago=timedelta(hours=2), phase="ended")
    result = scaletrain("doctor", str(folder.root), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
