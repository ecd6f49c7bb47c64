"""Every strategy trains like DDP and like one process: same loss curve, step for step.

The tiny model has its blocks in a ModuleList, so FSDP shards per block; every run starts
from different random weights on each rank (seeded by rank), so every strategy must also
start from rank 0's weights as DDP does. Tolerances: float32 runs differ only in the order
of sums (relative 1e-5); bf16 keeps 8 bits of mantissa, so its curve stays within 1% of
float32's over these few steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, torchrun

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

FLOAT32_RTOL = 1e-5
BF16_RTOL = 1e-2
ACCUMULATE = {"accumulation_steps": 2, "max_grad_norm": 0.5}

SINGLE = {"ddp": {}, "ddp_accumulate": ACCUMULATE}
TWO = {
    "ddp": {},
    "fsdp": {"strategy": "fsdp"},
    "fsdp_no_reshard": {"strategy": "fsdp", "reshard_after_forward": False},
    "fsdp_recompute_accumulate": {
        "strategy": "fsdp",
        "activation_checkpointing": True,
        **ACCUMULATE,
    },
    "zero1": {"strategy": "zero1"},
    "zero2": {"strategy": "zero2"},
    "zero3": {"strategy": "zero3"},
    "zero3_accumulate": {"strategy": "zero3", **ACCUMULATE},
    "ddp_bf16": {"precision": "bf16"},
    "fsdp_bf16": {"strategy": "fsdp", "precision": "bf16"},
    "zero3_bf16": {"strategy": "zero3", "precision": "bf16"},
}
FOUR = {
    "ddp": {},
    "fsdp": {"strategy": "fsdp"},
    "hsdp": {"strategy": "hsdp", "shard_size": 2},
    "hsdp_accumulate": {"strategy": "hsdp", "shard_size": 2, **ACCUMULATE},
}


def run(out: Path, nproc: int, runs: dict[str, dict[str, object]]) -> dict[str, list[float]]:
    specs = [f"{label}={json.dumps(options)}" for label, options in runs.items()]
    seeds = ["--seed-per-rank"] if nproc > 1 else []
    result = torchrun(WORKERS / "strategies.py", f"--out={out}", *seeds, *specs, nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    curves: dict[str, list[float]] = json.loads((out / f"losses-{nproc}.json").read_text())
    return curves


@pytest.fixture(scope="module")
def curves(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, list[float]]]:
    out = tmp_path_factory.mktemp("strategies")
    return {nproc: run(out, nproc, runs) for nproc, runs in ((1, SINGLE), (2, TWO), (4, FOUR))}


def reference(label: str, curves: dict[int, dict[str, list[float]]]) -> list[float]:
    """The single process's curve with the same accumulation and clipping."""
    return curves[1]["ddp_accumulate" if label.endswith("accumulate") else "ddp"]


def test_one_process_learns(curves: dict[int, dict[str, list[float]]]) -> None:
    single = curves[1]["ddp"]
    assert single[-1] < 0.9 * single[0]


@pytest.mark.parametrize("nproc", [2, 4])
def test_float32_strategies_follow_one_process_step_for_step(
    curves: dict[int, dict[str, list[float]]], nproc: int
) -> None:
    for label, curve in curves[nproc].items():
        if "bf16" in label:
            continue
        assert curve == pytest.approx(reference(label, curves), rel=FLOAT32_RTOL), label


def test_bf16_strategies_stay_near_float32(curves: dict[int, dict[str, list[float]]]) -> None:
    for label in ("ddp_bf16", "fsdp_bf16", "zero3_bf16"):
        curve = curves[2][label]
        assert curve == pytest.approx(curves[1]["ddp"], rel=BF16_RTOL), label
        assert curve != curves[1]["ddp"], f"{label} did not compute in bf16"
