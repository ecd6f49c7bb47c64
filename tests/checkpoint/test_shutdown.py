"""st.shutdown() right after an asynchronous save started: the save completes first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess


def test_shutdown_waits_for_the_save_in_flight(tmp_path: Path) -> None:
    result = torchrun(WORKERS / "shutdown_during_save.py", f"--out={tmp_path}", nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(2):
        on_disk = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert on_disk == {"latest": "step-0000001", "partial": []}
