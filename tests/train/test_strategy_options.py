"""Wrong combinations of st.wrap's options stop with the problem and the fix (one process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import scaletrain as st
from scaletrain.core.errors import ScaletrainError
from scaletrain.train.strategies.blocks import find_blocks
from scaletrain.train.strategies.deepspeed import deepspeed_config
from scaletrain.train.strategies.options import WrapOptions
from scaletrain.train.strategies.precision import Precision


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.stem(x)


def refused(hint_part: str, **options: object) -> ScaletrainError:
    model = Stack()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ScaletrainError) as caught:
        st.wrap(model, optimizer, **options)  # type: ignore[call-overload]
    assert hint_part in caught.value.hint
    return caught.value


def test_unknown_strategy_lists_the_strategies(single_process: st.DistEnv) -> None:
    error = refused("ddp, fsdp, hsdp, zero1, zero2, zero3, deepspeed", strategy="zero4")
    assert "Unknown strategy 'zero4'" in error.problem


def test_fp16_on_a_cpu_suggests_bf16(single_process: st.DistEnv) -> None:
    error = refused("precision='bf16'", precision="fp16")
    assert error.problem == "fp16 needs a GPU: this process runs on the CPU."


def test_zero3_without_deepspeed_installed_suggests_fsdp(
    single_process: st.DistEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as if it were not installed
    error = refused("strategy='fsdp'", strategy="zero3")
    assert "needs DeepSpeed, which is not installed" in error.problem


def test_deepspeed_needs_the_optimizer(single_process: st.DistEnv) -> None:
    with pytest.raises(ScaletrainError, match="needs it when the model is wrapped") as caught:
        st.wrap(Stack(), strategy="zero2")
    assert "st.wrap(model, optimizer, strategy='zero2')" in caught.value.hint


def test_accumulation_without_an_optimizer_says_where_it_happens(
    single_process: st.DistEnv,
) -> None:
    with pytest.raises(ScaletrainError, match="happen in the optimizer step"):
        st.wrap(Stack(), accumulation_steps=4)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"shard_size": 2}, "shard_size applies to strategy 'hsdp' only"),
        ({"reshard_after_forward": False}, "applies to FSDP and HSDP, not 'ddp'"),
        ({"strategy": "deepspeed"}, "strategy='deepspeed' needs a DeepSpeed config"),
        ({"deepspeed_config": {}}, "A DeepSpeed config was given but the strategy is 'ddp'"),
        ({"accumulation_steps": 0}, "accumulation_steps=0 is not a positive number"),
        ({"max_grad_norm": 0.0}, "max_grad_norm=0.0 would zero every gradient"),
        ({"precision": "int8"}, "Unknown precision 'int8'"),
    ],
)
def test_options_that_do_not_go_together(options: dict[str, object], problem: str) -> None:
    with pytest.raises(ScaletrainError, match=problem.replace("(", r"\(")) as caught:
        WrapOptions(**options)  # type: ignore[arg-type]
    assert caught.value.hint


def test_hsdp_groups_must_divide_the_processes(single_process: st.DistEnv) -> None:
    error = refused("shard_size that divides", strategy="hsdp", shard_size=2)
    assert "do not divide the 1 processes" in error.problem


def test_ddp_options_belong_to_ddp(single_process: st.DistEnv) -> None:
    error = refused("strategy='ddp'", strategy="fsdp", find_unused_parameters=True)
    assert "find_unused_parameters are options of DistributedDataParallel" in error.problem


def test_batches_that_do_not_split_into_micro_batches(single_process: st.DistEnv) -> None:
    model = Stack()
    training = st.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), accumulation_steps=2)
    with pytest.raises(ScaletrainError, match="5 samples on this rank does not split into 2"):
        list(training.micro_batches(torch.zeros(5, 4)))
    parts = list(training.micro_batches(torch.zeros(6, 4), torch.arange(6)))
    assert [tuple(part[0].shape) for part in parts] == [(3, 4), (3, 4)]
    assert parts[1][1].tolist() == [3, 4, 5]


def test_step_and_backward_in_the_wrong_order(single_process: st.DistEnv) -> None:
    model = Stack()
    training = st.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), accumulation_steps=2)
    with pytest.raises(ScaletrainError, match="step\\(\\) after 0 backward pass"):
        training.step()
    for _ in range(2):
        training.backward(training.model(torch.ones(2, 4)).sum())
    with pytest.raises(ScaletrainError, match="backward\\(\\) was called 3 times"):
        training.backward(training.model(torch.ones(2, 4)).sum())


def test_clipping_returns_the_norm_before_clipping(single_process: st.DistEnv) -> None:
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    training = st.wrap(model, torch.optim.SGD(model.parameters(), lr=1.0), max_grad_norm=1.0)
    # loss = 3·w0 + 4·w1: gradient (3, 4), norm 5, clipped to norm 1 → step (-0.6, -0.8)
    training.backward(training.model(torch.tensor([[3.0, 4.0]])).sum())
    norm = training.step()
    assert norm is not None and float(norm) == pytest.approx(5.0)
    assert model.weight.detach().flatten().tolist() == pytest.approx([-0.6, -0.8])
    assert model.weight.grad is None  # step() zeroes the gradients


def test_bf16_runs_the_forward_pass_in_bf16_and_keeps_float32_weights(
    single_process: st.DistEnv,
) -> None:
    model = st.wrap(nn.Linear(4, 4), precision="bf16")
    assert model(torch.ones(1, 4)).dtype == torch.bfloat16
    assert model.weight.dtype == torch.float32
    assert st.unwrap(model) is model


def test_default_blocks_are_the_children_of_module_lists() -> None:
    model = Stack()
    assert find_blocks(model, None) == list(model.blocks)
    assert find_blocks(model, "blocks") == list(model.blocks)
    assert find_blocks(model, ["stem", "blocks.1"]) == [model.stem, model.blocks[1]]
    assert find_blocks(model, nn.Sequential) == list(model.blocks)
    with pytest.raises(ScaletrainError, match="no module named 'head'") as caught:
        find_blocks(model, "head")
    assert "top level: stem, blocks" in caught.value.hint
    with pytest.raises(ScaletrainError, match="no module of class Conv2d"):
        find_blocks(model, nn.Conv2d)


def test_deepspeed_config_from_the_options() -> None:
    options = WrapOptions(
        strategy="zero3", precision="bf16", accumulation_steps=4, max_grad_norm=1.0
    )
    config = deepspeed_config(options, Precision.named("bf16", None))
    assert config["zero_optimization"] == {"stage": 3}
    assert config["bf16"] == {"enabled": True}
    assert (config["gradient_accumulation_steps"], config["gradient_clipping"]) == (4, 1.0)
    assert config["communication_data_type"] == "fp32"  # gradient sums stay exact


def test_deepspeed_config_file_completed_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_clipping": 0.5}))
    config = deepspeed_config(
        WrapOptions(strategy="deepspeed", deepspeed_config=path), Precision.named("fp32", None)
    )
    assert config["zero_optimization"]["stage"] == 2 and config["gradient_clipping"] == 0.5
    assert config["train_micro_batch_size_per_gpu"] == 1
    with pytest.raises(ScaletrainError, match="sets stage=2 but wrap was given strategy='zero3'"):
        deepspeed_config(
            WrapOptions(strategy="zero3", deepspeed_config=path), Precision.named("fp32", None)
        )
    with pytest.raises(ScaletrainError, match=r"gradient_clipping=0\.5 but wrap was given max"):
        deepspeed_config(
            WrapOptions(strategy="deepspeed", deepspeed_config=path, max_grad_norm=2.0),
            Precision.named("fp32", None),
        )
    with pytest.raises(ScaletrainError, match="Cannot read the DeepSpeed config"):
        deepspeed_config(
            WrapOptions(strategy="deepspeed", deepspeed_config=tmp_path / "missing.json"),
            Precision.named("fp32", None),
        )
