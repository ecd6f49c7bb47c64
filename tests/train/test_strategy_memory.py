"""FSDP's point, measured: with 4 ranks each holds a quarter of the parameters, gradients and
optimizer state, so its peak memory is below DDP's for the same model.

On the CPU the peak is the process's peak resident set (what Progress's summary records
there). glibc's malloc keeps freed memory of large tensors unless a fixed mmap threshold
makes it return them, so the workers run with MALLOC_MMAP_THRESHOLD_: the peak then follows
the tensors alive at once instead of the allocator's history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import WORKERS, clean_environ, torchrun

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

MODEL_GB = 16.8e6 * 4 / 1e9  # the worker's float32 parameters: 0.067 GB


def peak_memory(tmp_path: Path, strategy: str) -> list[float]:
    out = tmp_path / f"{strategy}.json"
    result = torchrun(
        WORKERS / "strategy_memory.py",
        f"--strategy={strategy}",
        f"--out={out}",
        nproc=4,
        environ=clean_environ(MALLOC_MMAP_THRESHOLD_="65536"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    peaks: list[float] = json.loads(out.read_text())["peak_memory_gb"]
    assert len(peaks) == 4  # one value per rank
    return peaks


def test_fsdp_peak_memory_per_rank_is_below_ddp(tmp_path: Path) -> None:
    ddp, fsdp = peak_memory(tmp_path, "ddp"), peak_memory(tmp_path, "fsdp")
    # DDP keeps parameters, gradients, gradient buckets and Adam's two moments whole on every
    # rank (5 × the model); FSDP a quarter of them. Sharding must save at least one model.
    assert max(fsdp) + MODEL_GB < min(ddp), (ddp, fsdp)
