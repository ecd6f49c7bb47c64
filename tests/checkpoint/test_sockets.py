"""What a Checkpointer costs in groups and sockets, on 16 local ranks: a gloo group is a full
mesh (a connection to every other rank), so large jobs must not open more than needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess

RANKS = 16


def test_checkpointer_groups_and_sockets_per_process(tmp_path: Path) -> None:
    result = torchrun(WORKERS / "checkpoint_sockets.py", f"--out={tmp_path}", nproc=RANKS)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(RANKS):
        added = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # CPU training with synchronous saves: the training's own group serves; nothing new.
        assert added["gloo, synchronous"] == 0, added
        # One group: a connection to each of the 15 other ranks (and at most a listener).
        one_group = added["gloo, asynchronous"]
        assert RANKS - 1 <= one_group <= RANKS, added
        assert added["nccl, synchronous"] == one_group, added
        assert added["nccl, asynchronous"] == 2 * one_group, added
