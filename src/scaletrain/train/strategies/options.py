"""What `wrap` may be asked for, checked before anything is built.

Every wrong combination is one `ScaletrainError` that names the problem and the fix; the
checks that need the running processes (device, world size, installed libraries) are in
`check_environment`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.layout import DistEnv

# name -> what it keeps on each GPU; the order is the order of growing memory savings.
STRATEGIES = {
    "ddp": "DistributedDataParallel: the whole model, its gradients and optimizer state on "
    "every GPU; gradients all-reduced",
    "fsdp": "FSDP2 (fully_shard): parameters, gradients and optimizer state sharded over all "
    "GPUs; each block gathered just before it runs",
    "hsdp": "FSDP2 on a 2-D mesh: sharded over the GPUs of a node, replicated across nodes",
    "zero1": "DeepSpeed ZeRO stage 1: optimizer state sharded",
    "zero2": "DeepSpeed ZeRO stage 2: optimizer state and gradients sharded",
    "zero3": "DeepSpeed ZeRO stage 3: parameters, gradients and optimizer state sharded",
    "deepspeed": "DeepSpeed with your own config file (its zero_optimization.stage decides)",
}
SHARDED = ("fsdp", "hsdp")
DEEPSPEED = ("zero1", "zero2", "zero3", "deepspeed")

# precision name -> what it means for the computation (the master weights stay float32).
PRECISIONS = {
    "fp32": "float32 everywhere",
    "bf16": "bfloat16 compute, float32 master weights; no loss scaling needed",
    "fp16": "float16 compute with a dynamic loss scaler, float32 master weights (GPUs only)",
}

BlockSpec = str | type[nn.Module]


def _choices(table: Mapping[str, str]) -> str:
    return ", ".join(table)


@dataclass(frozen=True, kw_only=True, slots=True)
class WrapOptions:
    """The options of `scaletrain.wrap`, validated on construction."""

    strategy: str = "ddp"
    precision: str = "fp32"
    """Compute precision: fp32, bf16 or fp16 (see PRECISIONS)."""
    reduce_precision: str | None = None
    """Precision of gradient reductions; None: float32 (exact sums whatever the compute)."""
    blocks: BlockSpec | Sequence[BlockSpec] | None = None
    """Units to shard and to checkpoint: a module name (the module itself; for a ModuleList, its
    children), a class (every instance), or a list of them; None: the children of every
    top-level ModuleList (the transformer blocks of most models)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass instead of keeping them."""
    reshard_after_forward: bool = True
    """FSDP/HSDP: free each block's gathered parameters after its forward (less memory, one
    more all-gather in the backward pass)."""
    shard_size: int | None = None
    """HSDP: processes per shard group; None: the processes of one node."""
    accumulation_steps: int = 1
    """Micro-batches per optimizer step; gradients are synchronised on the last one only."""
    max_grad_norm: float | None = None
    """Clip the global gradient norm (over all shards) to this value at each step."""
    deepspeed_config: str | Path | Mapping[str, Any] | None = None
    """A DeepSpeed config (JSON file or dict); its values win over the options it repeats."""
    sync_batchnorm_layers: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ScaletrainError(
                f"Unknown strategy {self.strategy!r}.",
                f"use one of {_choices(STRATEGIES)}.",
            )
        for option, value in (
            ("precision", self.precision),
            ("reduce_precision", self.reduce_precision),
        ):
            if value is not None and value not in PRECISIONS:
                raise ScaletrainError(
                    f"Unknown {option} {value!r}.", f"use one of {_choices(PRECISIONS)}."
                )
        if self.accumulation_steps < 1:
            raise ScaletrainError(
                f"accumulation_steps={self.accumulation_steps} is not a positive number.",
                "use 1 for no accumulation, or the number of micro-batches per optimizer step.",
            )
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ScaletrainError(
                f"max_grad_norm={self.max_grad_norm} would zero every gradient.",
                "give a positive norm such as 1.0, or leave max_grad_norm out to not clip.",
            )
        self._check_strategy_specific_options()

    def _check_strategy_specific_options(self) -> None:
        if self.shard_size is not None and self.strategy != "hsdp":
            raise ScaletrainError(
                f"shard_size applies to strategy 'hsdp' only, not {self.strategy!r}.",
                "use strategy='hsdp' to shard within groups of shard_size processes, or "
                "leave shard_size out.",
            )
        if not self.reshard_after_forward and self.strategy not in SHARDED:
            raise ScaletrainError(
                f"reshard_after_forward=False applies to FSDP and HSDP, not {self.strategy!r}.",
                "use strategy='fsdp' or 'hsdp', or leave reshard_after_forward out.",
            )
        if self.deepspeed_config is not None and self.strategy not in DEEPSPEED:
            raise ScaletrainError(
                f"A DeepSpeed config was given but the strategy is {self.strategy!r}.",
                "use strategy='deepspeed' (the config decides the ZeRO stage) or "
                "'zero1'/'zero2'/'zero3'.",
            )
        if self.strategy == "deepspeed" and self.deepspeed_config is None:
            raise ScaletrainError(
                "strategy='deepspeed' needs a DeepSpeed config.",
                "pass deepspeed_config='ds_config.json' (e.g. args.deepspeed_config), or use "
                "strategy='zero1', 'zero2' or 'zero3' to have one made from the options.",
            )


def check_environment(options: WrapOptions, env: DistEnv, *, has_optimizer: bool) -> None:
    """Refuse what cannot run in this process: its device, world size and libraries."""
    if "fp16" in (options.precision, options.reduce_precision) and env.device.type == "cpu":
        raise ScaletrainError(
            "fp16 needs a GPU: this process runs on the CPU.",
            "use precision='bf16' (no loss scaler needed), or run on GPUs.",
        )
    if options.strategy in DEEPSPEED:
        if importlib.util.find_spec("deepspeed") is None:
            raise ScaletrainError(
                f"Strategy {options.strategy!r} needs DeepSpeed, which is not installed.",
                "pip install deepspeed (inside your container or venv), or use "
                "strategy='fsdp', which needs only PyTorch.",
            )
        if not has_optimizer:
            raise ScaletrainError(
                "DeepSpeed shards the optimizer, so it needs it when the model is wrapped.",
                "pass it along: training = st.wrap(model, optimizer, strategy="
                f"{options.strategy!r}).",
            )
    in_the_step = options.accumulation_steps > 1 or options.max_grad_norm
    if not has_optimizer and (in_the_step or options.precision == "fp16"):
        raise ScaletrainError(
            "Gradient accumulation, clipping and fp16's loss scaling happen in the optimizer step.",
            "pass the optimizer: training = st.wrap(model, optimizer, ...), then call "
            "training.backward(loss) and training.step().",
        )
    if options.strategy == "hsdp":
        shard_size = options.shard_size or env.local_world_size
        if env.world_size % shard_size:
            raise ScaletrainError(
                f"HSDP shard groups of {shard_size} processes do not divide the "
                f"{env.world_size} processes.",
                "use a shard_size that divides the number of processes (usually the "
                "processes per node), or strategy='fsdp'.",
            )
