"""FSDP's gradients are the average over ranks, as DDP's are, on every torch the package
supports: torch 2.7's gloo sums where FSDP asks for an average (N ranks: N times the
gradient), which scaletrain finds and mends; HSDP, whose all-reduce gloo cannot average
there, is refused with what to use instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun
from tests.support.torch_features import gloo_all_reduce_averages

pytestmark = pytest.mark.multiprocess


def sharded_against_ddp(tmp_path: Path, options: dict[str, object]) -> dict[str, object]:
    out = tmp_path / "gradients.json"
    result = torchrun(WORKERS / "fsdp_gradients.py", f"--out={out}", json.dumps(options))
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, object] = json.loads(out.read_text())
    return found


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fsdp_gradients_are_ddps_average(tmp_path: Path, precision: str) -> None:
    found = sharded_against_ddp(tmp_path, {"strategy": "fsdp", "precision": precision})
    assert found["parameters"] is True
    # float32 sums in another order; bf16 rounds each gradient to 8 bits of mantissa.
    assert found["largest_relative_difference"] < (1e-5 if precision == "fp32" else 2e-2)


def test_hsdp_gradients_are_ddps_average_or_hsdp_is_refused_by_name(tmp_path: Path) -> None:
    found = sharded_against_ddp(tmp_path, {"strategy": "hsdp", "shard_size": 1})
    if gloo_all_reduce_averages():
        assert found.get("refused") is None
        assert found["largest_relative_difference"] < 1e-5
    else:
        assert "strategy='hsdp' needs an all-reduce that averages" in str(found["refused"])
        assert "HINT: use strategy='fsdp' (or 'ddp') here, or a newer torch" in str(
            found["refused"]
        )
