"""Waits between ranks that last longer than the process group's timeout (NCCL's is 10
minutes): rank_zero_first and barrier wait on the rendezvous store, with their own timeout.
The same code runs for gloo and NCCL groups; here the group's timeout is made short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess


def test_waits_longer_than_the_group_timeout_succeed(tmp_path: Path) -> None:
    result = torchrun(
        WORKERS / "long_waits.py",
        f"--out={tmp_path}",
        "--group-timeout=2",
        "--first-seconds=5",
        "--late-seconds=5",
        nproc=3,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(3):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert record == {"found_ready": True, "total": 3.0}


def test_a_wait_gives_up_after_its_own_timeout_naming_what_it_waited_for(tmp_path: Path) -> None:
    result = torchrun(
        WORKERS / "long_waits.py",
        f"--out={tmp_path}",
        "--group-timeout=60",
        "--first-seconds=8",
        "--wait-timeout=2",
        nproc=2,
    )
    assert result.returncode != 0
    assert "Waited 0:00:02 for rank 0 to finish its rank_zero_first block" in result.stderr
    assert "st.rank_zero_first(timeout=...)" in result.stderr
