"""Gradient accumulation skips the gradient collectives on every micro-batch but the last.

A step of 4 micro-batches must run as many all_reduce (DDP) or reduce_scatter (FSDP, HSDP)
operations as a step of one: otherwise accumulation costs 4 times the communication, which
is what no_sync() and FSDP's set_requires_gradient_sync() exist to avoid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess


def test_accumulation_synchronises_gradients_once_per_step(tmp_path: Path) -> None:
    out = tmp_path / "counts.json"
    result = torchrun(WORKERS / "gradient_sync.py", f"--out={out}", "ddp", "fsdp", nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(out.read_text())
    for strategy, by_steps in counts.items():
        assert by_steps["1"] > 0, f"{strategy}: no gradient collective seen in the trace"
        assert by_steps["4"] == by_steps["1"], f"{strategy}: {by_steps} (micro-batches: 1, 4)"
