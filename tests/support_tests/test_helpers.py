"""The helpers many tests share (tests/support/): waiting, ranks started by hand, scratch
network namespaces. Fast: no torch, no Slurm."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S
from tests.support.netns import NETNS_DIR, ip, scratch_namespaces
from tests.support.ranks import start_ranks
from tests.support.waiting import wait_until

# Each rank prints what it was told, as RANK:LOCAL_RANK:GROUP_RANK:WORLD_SIZE:extra.
SAYS = (
    "import os; print(':'.join(os.environ.get(name, '-') for name in "
    "('RANK', 'LOCAL_RANK', 'GROUP_RANK', 'WORLD_SIZE', 'EXTRA')))"
)


def test_wait_until_returns_the_moment_the_condition_held() -> None:
    ready_at = time.monotonic() + 0.1
    held_at = wait_until(lambda: time.monotonic() >= ready_at, "a moment", pause_s=0.01)
    assert held_at >= ready_at


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for nothing"):
        wait_until(lambda: False, "nothing", timeout_s=0.05, pause_s=0.01)


def test_ranks_get_their_numbers_on_pipes() -> None:
    ranks = start_ranks([sys.executable, "-c", SAYS], 2, extra={"EXTRA": "x"})
    said = [rank.communicate(timeout=PROCESS_TIMEOUT_S)[0].strip() for rank in ranks]
    assert said == ["0:0:0:2:x", "1:1:0:2:x"]


def test_ranks_one_per_node_write_their_logs(tmp_path: Path) -> None:
    ranks = start_ranks([sys.executable, "-c", SAYS], 2, one_per_node=True, logs=tmp_path)
    assert [rank.wait(timeout=PROCESS_TIMEOUT_S) for rank in ranks] == [0, 0]
    said = [(tmp_path / f"rank-{rank}.out").read_text().strip() for rank in range(2)]
    assert said == ["0:0:0:2:-", "1:0:1:2:-"]


def test_scratch_namespaces_are_gone_after_the_test() -> None:
    names = (f"st-help-{time.monotonic_ns()}", f"st-help-{time.monotonic_ns()}-b")
    with scratch_namespaces(*names):
        assert all((NETNS_DIR / name).exists() for name in names)
        ip("-n", names[0], "link", "show", "lo")
    assert not any((NETNS_DIR / name).exists() for name in names)
