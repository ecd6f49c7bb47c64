"""Helpers for the diagnostics tests: ranks started as a job would start them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import PROCESS_TIMEOUT_S, REPO
from tests.support.ranks import start_ranks

# Started as files, as a launcher starts a script (python -m runs the same __main__.py).
PREFLIGHT = REPO / "src" / "scaletrain" / "diagnose" / "preflight" / "__main__.py"
BENCH = REPO / "src" / "scaletrain" / "diagnose" / "bench" / "__main__.py"


def run_ranks(
    world_size: int,
    args: Sequence[str] = (),
    *,
    master_addr: str = "127.0.0.1",
    prefix: Sequence[Sequence[str]] = (),
    extra: dict[str, str] | None = None,
    script: Path = PREFLIGHT,
    one_per_node: bool = False,
) -> list[subprocess.CompletedProcess[str]]:
    """Run `script` once per rank to its end (tests/support/ranks.py); each rank's finished
    process, with what it printed."""
    ranks = start_ranks(
        [sys.executable, str(script), *args],
        world_size,
        master_addr=master_addr,
        prefix=prefix,
        one_per_node=one_per_node,
        # The join waits 3 × this: a rank pinned to one busy core of this shared 2-core
        # machine can take over 30 s to import torch (an option on the command wins).
        extra={"SCALETRAIN_RENDEZVOUS_TIMEOUT": "40", **(extra or {})},
    )
    finished = []
    for process in ranks:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
        finished.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return finished


def shown(result: subprocess.CompletedProcess[str]) -> str:
    """What the user sees on the terminal: the report (stdout) and the notes (stderr)."""
    return result.stdout + result.stderr
