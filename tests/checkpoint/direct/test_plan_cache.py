"""A save whose layout is the last save's reuses its plan: no global plan, no DCP collective;
its files are DCP's own (plain DCP loads them exactly), a new layout is planned anew, and a
write that fails on one rank fails the save on every rank."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from scaletrain.checkpoint.layout import checkpoint_name
from scaletrain.checkpoint.manifest import Manifest, verify_files
from tests.conftest import WORKERS, torchrun


def counts_after_each_save(stdout: str) -> dict[int, dict[str, int]]:
    """`saved step N: {...}` lines, by step."""
    found = re.findall(r"^saved step (\d+): (\{.*\})$", stdout, flags=re.MULTILINE)
    return {int(step): ast.literal_eval(counts) for step, counts in found}


def plain_dcp_load(folder: Path, into: Path) -> dict[str, Any]:
    """The model's state in a checkpoint folder, read by plain DCP without a process group."""
    dcp_to_torch_save(folder, into)
    state: dict[str, Any] = torch.load(into, weights_only=False)["model"]
    return state


def check_every_checkpoint(run_dir: Path, steps: list[int], plain: Path) -> None:
    """Each step's checkpoint passes its manifest check and loads with plain DCP exactly as
    the model was at that step; `.metadata` records the buffer's dtype of that step."""
    checkpoints = run_dir / "checkpoints"
    for step in steps:
        folder = checkpoints / checkpoint_name(step)
        assert verify_files(folder, Manifest.read(folder).files) == []
        saved = plain_dcp_load(folder, plain / f"plain-{step}.pt")
        reference = torch.load(run_dir / f"reference-{step}.pt")
        assert saved.keys() == reference.keys()
        for name, value in reference.items():
            assert saved[name].dtype == value.dtype, (step, name)
            assert torch.equal(saved[name], value), (step, name)
        scale = FileSystemReader(folder).read_metadata().state_dict_metadata["model.scale"]
        wanted = torch.float32 if step < 4 else torch.bfloat16
        assert scale.properties.dtype == wanted  # type: ignore[union-attr]


@pytest.mark.multiprocess
def test_saves_of_one_layout_reuse_the_plan_and_stay_dcps_own_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = torchrun(WORKERS / "plan_reuse.py", str(run_dir), nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = counts_after_each_save(result.stdout)

    # Step 1 planned by DCP; 2 and 3 reused it, with no collective of DCP's.
    assert counts[1]["global plans"] == counts[3]["global plans"] == 1
    assert counts[3]["DCP collectives"] == counts[1]["DCP collectives"] > 0
    # The bfloat16 buffer is a new layout: planned anew.
    assert counts[4]["global plans"] == 2
    # Step 5's write failed on rank 1, and the save failed on both ranks...
    for rank in (0, 1):
        assert re.search(
            rf"rank {rank}: the save of step 5 failed: .*No space left on device", result.stdout
        )
    # ...so step 6, of step 5's layout, was planned anew rather than trusted to a plan of a
    # save that did not succeed.
    assert "at the end: {'global plans': 3" in result.stdout

    checkpoints = run_dir / "checkpoints"
    assert (checkpoints / "LATEST").read_text().strip() == checkpoint_name(6)
    assert not (checkpoints / checkpoint_name(5)).exists()
    check_every_checkpoint(run_dir, [1, 2, 3, 4, 6], tmp_path)


@pytest.mark.multiprocess
def test_synchronous_saves_through_dcps_writer_reuse_the_plan_too(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = torchrun(WORKERS / "plan_reuse.py", str(run_dir), "synchronous", nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "written as a file image when synchronous: False" in result.stdout
    counts = counts_after_each_save(result.stdout)
    assert counts[1]["global plans"] == counts[3]["global plans"] == 1
    assert counts[3]["DCP collectives"] == counts[1]["DCP collectives"] > 0
    assert counts[4]["global plans"] == counts[5]["global plans"] == 2
    assert "at the end: {'global plans': 2" in result.stdout
    check_every_checkpoint(run_dir, [1, 2, 3, 4, 5, 6], tmp_path)
