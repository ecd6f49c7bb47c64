"""The preflight when rank 0 is slow to start, as on a busy site where importing torch from
a parallel file system takes minutes: the other ranks wait, say so, and pass once rank 0
listens; when they do give up, they say what rank 0 was doing.

Ranks are started as `srun` starts them (torch's env:// variables by hand, rank 0 hosting
the store inside its init), with a run folder, as in a generated job.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, clean_environ, free_port
from tests.diagnose.conftest import PREFLIGHT

pytestmark = pytest.mark.multiprocess

# Makes rank 0's `import torch` take SLOW_TORCH_S seconds longer: a busy file system.
SLOW_TORCH = """
import os, sys, time

class SlowTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            time.sleep(float(os.environ["SLOW_TORCH_S"]))
        return None

if os.environ.get("RANK") == "0" and os.environ.get("SLOW_TORCH_S"):
    sys.meta_path.insert(0, SlowTorch())
"""


def start_rank(
    rank: int, port: int, run_dir: Path, *prefix: str, **extra: str
) -> subprocess.Popen[str]:
    environ = clean_environ(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        SCALETRAIN_RUN_DIR=str(run_dir),
        **extra,
    )
    return subprocess.Popen(
        [*prefix, sys.executable, str(PREFLIGHT)],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_rank_0_that_starts_40_s_late_passes(tmp_path: Path) -> None:
    port = free_port()
    late = ("bash", "-c", 'sleep 40 && exec "$@"', "rank0")
    ranks = [start_rank(0, port, tmp_path, *late), start_rank(1, port, tmp_path)]
    outputs = [rank.communicate(timeout=PROCESS_TIMEOUT_S) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    waiting = outputs[1][1]
    assert "scaletrain preflight: rank 1 (" in waiting
    assert "waits for rank 0 to listen at 127.0.0.1:" in waiting
    assert "(30 s of at most 600): rank 0 has not started its preflight yet" in waiting


def test_ranks_that_give_up_say_rank_0_was_still_importing_torch(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_TORCH)
    slow = {"PYTHONPATH": str(hook), "SLOW_TORCH_S": "120"}
    port = free_port()
    timeout = {"SCALETRAIN_RENDEZVOUS_TIMEOUT": "15"}
    rank0 = start_rank(0, port, tmp_path, **slow, **timeout)
    try:
        rank1 = start_rank(1, port, tmp_path, **timeout)
        _, notes = rank1.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        rank0.kill()
        rank0.communicate(timeout=60)
    assert rank1.returncode == 1, notes
    assert "rendezvous: FAIL nothing listened at 127.0.0.1:" in notes
    assert "for 15 s: rank 0 on " in notes and "ago and was still importing torch" in notes
    assert "fix: rank 0 starts slowly (a busy file system): wait longer" in notes
