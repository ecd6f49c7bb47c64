"""An asynchronous checkpoint holds the state of the step it was taken at.

Its copy of the parameters and optimizer state runs in the writer thread while the next
forward and backward run; the next optimizer step waits for it. The state is large enough
(134 MB of weights and momentum) that the copy outlasts a forward and backward of two
samples: a step that did not wait changes momentum the copy has not reached yet (without
the step hook, the later layers' momentum differs here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

import scaletrain as st
from scaletrain.checkpoint.writer import BackgroundWriter
from tests.checkpoint.conftest import job_of, target_alone
from tests.conftest import WORKERS, torchrun

WIDTH, LAYERS, STEPS, EVERY = 2048, 4, 12, 3


def model_with_buffers() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH)]  # BatchNorm: buffers
    return nn.Sequential(*layers)


def tensors_of(state: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its path."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        found: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            found |= tensors_of(value, f"{prefix}/{key}" if prefix else str(key))
        return found
    return {}


def current_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Weights, buffers and momentum, copied now, by path, as a checkpoint holds them."""
    weights, optimizer_state = get_state_dict(model, [optimizer])
    both = {"model": weights, "optimizer": optimizer_state}
    return {path: value.clone() for path, value in tensors_of(both).items()}


def saved_state(folder: Path) -> dict[str, torch.Tensor]:
    """What a checkpoint folder holds, read by plain DCP into a fresh model and optimizer."""
    model = model_with_buffers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model(torch.ones(2, WIDTH)).sum().backward()
    optimizer.step()  # momentum buffers to load into
    weights, optimizer_state = get_state_dict(model, [optimizer])
    both = {"model": weights, "optimizer": optimizer_state}
    dcp.load(both, checkpoint_id=folder)
    return tensors_of(both)


def test_each_asynchronous_checkpoint_has_the_state_of_its_step(
    single_process: st.DistEnv, tmp_path: Path
) -> None:
    model = model_with_buffers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = st.Checkpointer(
        model=model,
        optimizer=optimizer,
        run_dir=tmp_path,
        asynchronous=True,
        every_steps=EVERY,
        every_minutes=None,
        keep=STEPS,
    )
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(2, WIDTH, generator=generator) for _ in range(STEPS)]
    expected: dict[int, dict[str, torch.Tensor]] = {}
    for _ in ckpt.epochs(1):
        for batch in ckpt.batches(batches):
            model(batch).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if ckpt.step % EVERY == 0:  # the boundary after this step saves step-<ckpt.step>
                expected[ckpt.step] = current_state(model, optimizer)
    ckpt.save()  # waits for the save in flight

    assert sorted(expected) == [3, 6, 9, 12]
    for step, state in expected.items():
        saved = saved_state(tmp_path / "checkpoints" / f"step-{step:07d}")
        assert saved.keys() == state.keys()
        different = [path for path, value in state.items() if not torch.equal(saved[path], value)]
        assert not different, f"step-{step:07d} differs from its step's state in {different}"
    # The steps after each save went on changing weights and momentum: a copy that ran into
    # the next step would hold some of them.
    assert not torch.equal(expected[3]["model/6.weight"], expected[6]["model/6.weight"])
    momentum = "optimizer/state/6.weight/momentum_buffer"
    assert not torch.equal(expected[3][momentum], expected[6][momentum])


def test_a_later_save_never_stages_into_a_tensor_training_owns(tmp_path: Path) -> None:
    # The first save copies `weight` in the writer thread, straight from training's tensor.
    # A later save whose state holds another tensor of that shape in the same place, copied
    # at the step boundary, must copy it into a buffer of its own, not into training's tensor.
    writer = BackgroundWriter(target_alone(tmp_path), pin_staging=False)
    weight = torch.randn(256, 256)
    before = weight.clone()
    writer.submit(job_of({"weight": weight}, step=1), later=frozenset({weight.data_ptr()}))
    writer.before_step()
    writer.wait()
    writer.submit(job_of({"weight": torch.randn(256, 256)}, step=2))
    writer.wait()
    assert torch.equal(weight, before)


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


def test_a_save_after_a_failed_asynchronous_one_holds_its_own_step(
    single_process: st.DistEnv, tmp_path: Path
) -> None:
    # A user's script that catches a failed background save and saves again must get the
    # state of the step it saves now, not what the failed save had copied early.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ckpt = st.Checkpointer(
        model=model,
        optimizer=optimizer,
        run_dir=tmp_path,
        asynchronous=True,
        every_steps=2,
        every_minutes=None,
    )
    # A file where step 4's folder goes: that save fails before its file is built.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-0000004.partial").write_text("in the way\n")
    generator = torch.Generator().manual_seed(0)
    for batch in ckpt.batches([torch.randn(2, 64, generator=generator) for _ in range(5)]):
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with pytest.raises(FileExistsError):
        ckpt.save()  # waits for step 4's save, and gets its error
    ckpt.save()

    folder = tmp_path / "checkpoints" / "step-0000005"
    saved = {"model": {name: torch.zeros_like(value) for name, value in model.state_dict().items()}}
    dcp.load(saved, checkpoint_id=folder)
    different = [
        name
        for name, value in model.state_dict().items()
        if not torch.equal(saved["model"][name], value)
    ]
    assert not different, f"step-0000005 holds other values than step 5's in {different}"
