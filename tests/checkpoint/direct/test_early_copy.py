"""The direct storage's early copy: what only optimizer steps change is copied in the
background, straight into the file image, and a later save never stages into training's
tensors; at two ranks the step is let go before DCP's plan, and a plan that moved the split
between the ranks gives the save up rather than write it wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from scaletrain.checkpoint.direct.storage import DirectStorage
from scaletrain.checkpoint.writer import BackgroundWriter
from tests.checkpoint.conftest import job_of, target_alone
from tests.conftest import WORKERS, torchrun


def test_a_later_save_never_stages_into_a_tensor_training_owns(tmp_path: Path) -> None:
    # The first save copies `weight` in the writer thread, straight from training's tensor.
    # A later save whose state holds another tensor of that shape in the same place, copied
    # at the step boundary, must copy it into a buffer of its own, not into training's tensor.
    target = target_alone(tmp_path)
    writer = BackgroundWriter(target, DirectStorage(target, pin=False, asynchronous=True))
    weight = torch.randn(256, 256)
    before = weight.clone()
    writer.submit(job_of({"weight": weight}, step=1), later=frozenset({weight.data_ptr()}))
    writer.before_step()
    writer.wait()
    writer.submit(job_of({"weight": torch.randn(256, 256)}, step=2))
    writer.wait()
    assert torch.equal(weight, before)


@pytest.mark.multiprocess
def test_two_ranks_let_the_step_go_before_the_plan_and_give_up_a_save_whose_plan_moved(
    tmp_path: Path,
) -> None:
    # DCP writes each replicated tensor from one rank; the early copy predicts which from the
    # last save and lets the step go before the plan. A plan that moved the split (a tensor
    # placed before them, from save 3 on) abandons that save; every other save holds the
    # state of its step.
    result = torchrun(WORKERS / "early_copy_ranks.py", f"--out={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = torch.load(tmp_path / "steps.pt", weights_only=True)
    assert recorded["let_go"] == {2: "before rank 1 started", 5: "before rank 1 started"}
    assert "checkpoint of step 3 abandoned: the plan gives this rank a tensor" in result.stderr
    folders = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert folders == ["LATEST", *(f"step-{step:07d}" for step in (1, 2, 4, 5))]
    for step in (1, 2, 4, 5):
        expected = recorded["states"][step]
        into = {"model": {name: torch.zeros_like(value) for name, value in expected.items()}}
        dcp.load(into, checkpoint_id=tmp_path / "checkpoints" / f"step-{step:07d}", no_dist=True)
        different = [
            name for name in expected if not torch.equal(into["model"][name], expected[name])
        ]
        assert not different, f"step {step} differs from its state in {different}"
