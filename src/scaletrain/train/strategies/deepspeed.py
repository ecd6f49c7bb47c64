"""DeepSpeed ZeRO stages 1-3: a config made from wrap's options (or read from your file),
an engine, and the training step in DeepSpeed's terms (engine.backward, engine.step)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.layout import DistEnv
from scaletrain.runtime.process_group import export_torch_variables
from scaletrain.train.strategies.options import WrapOptions
from scaletrain.train.strategies.precision import Precision
from scaletrain.train.strategies.training import Wrapped

_PRECISION_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
# DeepSpeed prints a throughput line every `steps_per_print` steps (10 by default); Progress
# already reports throughput.
_QUIET = 2**31 - 1


def _read_config(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Mapping):
        copied: dict[str, Any] = json.loads(json.dumps(source))  # a deep plain-JSON copy
        return copied
    path = Path(source)
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ScaletrainError(
            f"Cannot read the DeepSpeed config {path}: {error}.",
            "pass the path of a JSON file (DeepSpeed's --deepspeed_config), or a dict.",
        ) from None
    if not isinstance(loaded, dict):
        raise ScaletrainError(
            f"The DeepSpeed config {path} is not a JSON object.",
            "see https://www.deepspeed.ai/docs/config-json/ for its layout.",
        )
    return loaded


def _agree(
    config: dict[str, Any], key: str, ours: Any, default: Any, option: str, given: Any = None
) -> Any:
    """The config's value for `key`, or ours when it has none; both set and different is an
    error, since silently dropping either would train differently than asked. `given` is the
    option as the user wrote it, when that differs from the config's value (a strategy name)."""
    theirs = config.get(key)
    if theirs is None:
        config[key] = ours
        return ours
    if ours != default and theirs != ours:
        shown = ours if given is None else given
        raise ScaletrainError(
            f"The DeepSpeed config sets {key}={theirs!r} but wrap was given {option}={shown!r}.",
            f"set it in one place: remove {key} from the config or {option} from wrap.",
        )
    return theirs


def deepspeed_config(options: WrapOptions, precision: Precision) -> dict[str, Any]:
    """The DeepSpeed config: your file's values, completed from wrap's options."""
    config = _read_config(options.deepspeed_config) if options.deepspeed_config else {}
    zero = config.setdefault("zero_optimization", {})
    if options.strategy != "deepspeed":
        _agree(zero, "stage", int(options.strategy[-1]), None, "strategy", options.strategy)
    _agree(
        config, "gradient_accumulation_steps", options.accumulation_steps, 1, "accumulation_steps"
    )
    _agree(config, "gradient_clipping", options.max_grad_norm or 0.0, 0.0, "max_grad_norm")
    name = _PRECISION_NAMES[precision.compute]
    enabled = {key for key in ("bf16", "fp16") if config.get(key, {}).get("enabled")}
    if enabled and name != "fp32" and enabled != {name}:
        raise ScaletrainError(
            f"The DeepSpeed config enables {', '.join(sorted(enabled))} but wrap was given "
            f"precision={name!r}.",
            "set the precision in one place: in the config or in wrap.",
        )
    if not enabled and name != "fp32":
        config[name] = {"enabled": True}
    if options.reduce_precision or (not enabled and name != "fp32"):
        # float32 gradient reductions unless asked otherwise, as for DDP and FSDP.
        config.setdefault("communication_data_type", options.reduce_precision or "fp32")
    if "train_batch_size" not in config:
        # DeepSpeed insists on a batch size; it uses it only for its own data loader and logs.
        config.setdefault("train_micro_batch_size_per_gpu", 1)
    config.setdefault("steps_per_print", _QUIET)
    # Any torch optimizer works with ZeRO; DeepSpeed only tested some, and asks to confirm.
    config.setdefault("zero_allow_untested_optimizer", True)
    return config


def _cast_floating_inputs(dtype: torch.dtype) -> Any:
    """A forward pre-hook that casts floating-point inputs to the model's dtype: DeepSpeed's
    bf16/fp16 models expect it, autocast under DDP does it by itself."""

    def cast(value: Any) -> Any:
        return (
            value.to(dtype)
            if isinstance(value, torch.Tensor) and value.is_floating_point()
            else value
        )

    def hook(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return tuple(cast(value) for value in args), {
            key: cast(value) for key, value in kwargs.items()
        }

    return hook


def _without_cpu_shared_memory_kernel() -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce for CPU processes.

    On the CPU, DeepSpeed's communication JIT-compiles a C++ kernel when it starts (minutes
    on a small machine, and again whenever a build was interrupted); gloo already carries
    every collective scaletrain needs. Marked unavailable, as DeepSpeed's own probe marks it
    without a compiler; DeepSpeed keeps that probe in one dict for exactly such edits.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


class DeepSpeedWrapped(Wrapped):
    """The DeepSpeed engine behind the same calls: backward and step go to the engine, which
    scales the loss (fp16, accumulation), clips and steps its sharded optimizer."""

    def backward(self, loss: torch.Tensor) -> None:
        last = self._count_backward()
        engine: Any = self.model
        engine.backward(loss)  # divides by gradient_accumulation_steps itself
        if not last:
            self._gradient_sync(self._backwards == self.accumulation_steps - 1)

    def step(self) -> torch.Tensor | None:
        self._check_step()
        engine: Any = self.model
        engine.step()  # optimizer step and zero_grad, at the boundary set by gradient_sync
        if self.accumulation_steps > 1:
            self._gradient_sync(False)
        norm = engine.get_global_grad_norm() if self.max_grad_norm else None
        return None if norm is None else torch.as_tensor(float(norm))


def start_engine(
    model: nn.Module,
    optimizer: Optimizer,
    env: DistEnv,
    options: WrapOptions,
    precision: Precision,
) -> DeepSpeedWrapped:
    """deepspeed.initialize with the made config, on the process group scaletrain started."""
    import deepspeed

    # DeepSpeed reads LOCAL_RANK and friends itself, also in a single plain process.
    export_torch_variables(env, os.environ)
    if env.device.type == "cpu":
        _without_cpu_shared_memory_kernel()
    config = deepspeed_config(options, precision)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, dist_init_required=False
    )
    if config.get("bf16", {}).get("enabled") or config.get("fp16", {}).get("enabled"):
        dtype = torch.bfloat16 if config.get("bf16", {}).get("enabled") else torch.float16
        engine.module.register_forward_pre_hook(_cast_floating_inputs(dtype), with_kwargs=True)
    clipping = config["gradient_clipping"]
    return DeepSpeedWrapped(
        model=engine,
        optimizer=optimizer,
        strategy=options.strategy,
        accumulation_steps=int(config["gradient_accumulation_steps"]),
        max_grad_norm=float(clipping) if clipping else None,
        gradient_sync=engine.set_gradient_accumulation_boundary,
    )
