"""`reduce_precision` decides the dtype of the gradient reduction over ranks (DDP: a comm hook;
FSDP: its reduce dtype): reduced in bf16, every gradient value is a bf16 number; in float32,
almost none is. A reduction that ignored the option would show float32's share in both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = pytest.mark.multiprocess


def test_gradients_are_reduced_in_the_precision_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "shares.json"
    result = torchrun(WORKERS / "reduce_precision.py", f"--out={out}", "ddp", "fsdp", nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    for strategy, share in json.loads(out.read_text()).items():
        assert share["bf16"] == 1.0, f"{strategy}: {share}"
        assert share["fp32"] < 0.5, f"{strategy}: {share}"
