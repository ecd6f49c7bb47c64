"""An asynchronous checkpoint holds the state of the step it was taken at, on each storage.

DCP's stager copies the whole state at the step boundary. The direct storage copies the
parameters and optimizer state in the background while the next forward and backward run,
and the next optimizer step waits for it: the state is large enough (134 MB of weights and
momentum) that the copy outlasts a forward and backward of two samples, so a step that did
not wait would change momentum the copy has not reached yet.
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
from scaletrain.checkpoint.storage import StorageName

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
    single_process: st.DistEnv, tmp_path: Path, storage: StorageName
) -> None:
    model = model_with_buffers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = st.Checkpointer(
        model=model,
        optimizer=optimizer,
        run_dir=tmp_path,
        asynchronous=True,
        storage=storage,
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


def test_a_save_after_a_failed_asynchronous_one_holds_its_own_step(
    single_process: st.DistEnv, tmp_path: Path, storage: StorageName
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
        storage=storage,
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
    with pytest.raises(BaseException, match=r"step-0000004\.partial"):  # DCP's error is one
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
