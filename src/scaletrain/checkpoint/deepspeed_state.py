"""DeepSpeed ZeRO state as DCP shards, so that a DeepSpeed run resumes at any world size.

ZeRO keeps float32 master weights and optimizer state in flat partitions, one per rank, and
each parameter's part of a partition is a contiguous slice of the flattened parameter. Here
every parameter's master weights and each optimizer state are saved as a 1-D tensor of the
parameter's size, of which every rank writes the slice it holds (uneven shards); DCP then
reads back whatever slices the partitions of the new world size hold. No rank ever gathers a
whole parameter. The shapes are saved too, for `scaletrain export`.

The slices come from DeepSpeed's own fragment bookkeeping: ZeRO-1/2 `param._hp_mapping`,
ZeRO-3 `safe_get_local_fp32_param` / `safe_get_local_optimizer_state` and `param.ds_tensor`
(written against DeepSpeed 0.19).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaletrain.core.errors import ScaletrainError
from scaletrain.runtime.process_group import all_gather_objects

# Entries of the DeepSpeed section of a checkpoint: the shapes for export, and the engine's
# counters (its learning-rate schedulers are the user's own objects).
SECTION = "deepspeed"
SHAPES = "shapes"
_COUNTERS = ("global_steps", "global_samples", "skipped_steps")


def is_deepspeed_engine(model: nn.Module) -> bool:
    """True for a DeepSpeed engine (what st.wrap returns as the model for zero1-3)."""
    return type(model).__module__.startswith("deepspeed") and hasattr(model, "optimizer")


@dataclass(frozen=True, slots=True)
class _Slice:
    """This rank's part of one flattened parameter: views into DeepSpeed's own buffers."""

    offset: int
    master: torch.Tensor
    states: dict[str, torch.Tensor]


def _zero3_slice(parameter: nn.Parameter, keys: list[str], rank: int) -> _Slice | None:
    from deepspeed.utils import safe_get_local_fp32_param, safe_get_local_optimizer_state

    partition = parameter.ds_tensor.numel()  # type: ignore[attr-defined]  # padded, equal on every rank
    offset = rank * partition
    real = min(partition, parameter.ds_numel - offset)  # type: ignore[attr-defined]
    if real <= 0:
        return None
    return _Slice(
        offset,
        safe_get_local_fp32_param(parameter)[:real],
        {key: safe_get_local_optimizer_state(parameter, key)[:real] for key in keys},
    )


def _zero12_slice(parameter: nn.Parameter, keys: list[str], base: Any) -> _Slice | None:
    mapping = parameter._hp_mapping  # type: ignore[attr-defined]
    if mapping is None:
        return None  # nothing of this parameter in this rank's partition
    flat = base.param_groups[mapping.param_group_index]["params"][0]
    start, numel = mapping.hp_fragment_address.start, mapping.hp_fragment_address.numel
    return _Slice(
        mapping.lp_fragment_address.start,
        mapping.hp_fragment,
        {key: base.state[flat][key].narrow(0, start, numel) for key in keys},
    )


def _sharded(full_size: int, local: torch.Tensor, pieces: list[tuple[int, int, int]]) -> Any:
    """A 1-D ShardedTensor of `full_size` elements whose shards are (rank, offset, numel).

    Every rank has a shard, empty when it holds nothing of the parameter: DCP skips entries
    without a local shard when it plans a load, and would then miss them.
    """
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor.api import ShardedTensor
    from torch.distributed._shard.sharded_tensor.metadata import (
        ShardedTensorMetadata,
        TensorProperties,
    )
    from torch.distributed._shard.sharded_tensor.shard import Shard

    rank, device = dist.get_rank(), str(local.device)
    metadata = [
        ShardMetadata(
            shard_offsets=[offset], shard_sizes=[numel], placement=f"rank:{owner}/{device}"
        )
        for owner, offset, numel in pieces
    ]
    # A detached view: DCP's load writes into DeepSpeed's buffer through it.
    mine = [
        Shard(local.detach(), meta)
        for (owner, _, _), meta in zip(pieces, metadata, strict=True)
        if owner == rank
    ]
    global_metadata = ShardedTensorMetadata(
        shards_metadata=metadata,
        size=torch.Size([full_size]),
        tensor_properties=TensorProperties(dtype=torch.float32),
    )
    with warnings.catch_warnings():  # DTensor cannot express uneven slices; this still works
        warnings.simplefilter("ignore", FutureWarning)
        return ShardedTensor._init_from_local_shards_and_global_metadata(mine, global_metadata)


def _create_optimizer_state(base: torch.optim.Optimizer) -> None:
    """Let the optimizer create its state (zeros) by a step with zero gradients and lr 0, as
    DCP's get_state_dict does for a fresh optimizer: loading needs tensors to load into."""
    parameters = [parameter for group in base.param_groups for parameter in group["params"]]
    gradients = [parameter.grad for parameter in parameters]
    rates = [group["lr"] for group in base.param_groups]
    for parameter in parameters:
        parameter.grad = torch.zeros_like(parameter)
    for group in base.param_groups:
        group["lr"] = 0.0
    base.step()
    for group, rate in zip(base.param_groups, rates, strict=True):
        group["lr"] = rate
    for parameter, gradient in zip(parameters, gradients, strict=True):
        parameter.grad = gradient


class DeepSpeedState:
    """state_dict / load_state_dict for a DeepSpeed ZeRO engine (model and optimizer)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.zero = engine.optimizer
        self.base: torch.optim.Optimizer = self.zero.optimizer
        self.parameters = {
            name: parameter
            for name, parameter in engine.module.named_parameters()
            if parameter.requires_grad
        }
        self.zero3 = any(hasattr(parameter, "ds_id") for parameter in self.parameters.values())
        if not self.zero3 and not all(
            hasattr(parameter, "_hp_mapping") for parameter in self.parameters.values()
        ):
            raise ScaletrainError(
                "This DeepSpeed engine does not use ZeRO, whose state the Checkpointer saves.",
                "use strategy='zero1', 'zero2' or 'zero3' (or a config with "
                "zero_optimization.stage 1-3).",
            )

    def _flat_partitions(self) -> list[torch.Tensor]:
        """The float32 partitions the base optimizer steps (one per parameter group)."""
        if self.zero3:  # handed to the base optimizer only while it steps
            return list(self.zero.fp32_partitioned_groups_flat)
        # ZeRO-1/2 (and DeepSpeed's bf16 optimizer) give each group's partition to it for good.
        return [group["params"][0] for group in self.base.param_groups]

    def _create_optimizer_state(self) -> None:
        if not self.zero3:
            _create_optimizer_state(self.base)
            return
        # ZeRO-3 hands its partitions to the base optimizer only while it steps.
        self.zero._set_fp32_optimizer_param_groups()
        try:
            _create_optimizer_state(self.base)
        finally:
            self.zero._clear_fp32_optimizer_param_groups()

    def _state_keys(self) -> list[str]:
        """The optimizer's per-element states (Adam: exp_avg, exp_avg_sq), created if new."""
        if not self.base.state:
            self._create_optimizer_state()
        flat = self._flat_partitions()[0]
        return [
            key
            for key, value in self.base.state[flat].items()
            if isinstance(value, torch.Tensor) and value.shape == flat.shape
        ]

    def _slices(self, keys: list[str]) -> dict[str, _Slice]:
        """This rank's slice of every parameter (empty where it holds none of it)."""
        rank = dist.get_rank()
        slices = {}
        for name, parameter in self.parameters.items():
            found = (
                _zero3_slice(parameter, keys, rank)
                if self.zero3
                else _zero12_slice(parameter, keys, self.base)
            )
            if found is None:
                flat = self._flat_partitions()[0]
                nothing = flat.new_empty(0)
                found = _Slice(self._numel(name), nothing, {key: nothing for key in keys})
            slices[name] = found
        return slices

    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer entries for DCP; the tensors are views of DeepSpeed's buffers,
        so DCP's load writes straight into them."""
        keys = self._state_keys()
        slices = self._slices(keys)
        mine = {name: (piece.offset, piece.master.numel()) for name, piece in slices.items()}
        pieces: dict[str, list[tuple[int, int, int]]] = {name: [] for name in self.parameters}
        for rank, theirs in enumerate(all_gather_objects(mine)):
            for name, (offset, numel) in theirs.items():
                pieces[name].append((rank, offset, numel))

        def sharded(name: str, local: torch.Tensor) -> Any:
            return _sharded(self._numel(name), local, pieces[name])

        model: dict[str, Any] = {
            name: sharded(name, slices[name].master) for name in self.parameters
        }
        model |= self._buffers()
        states = {
            name: {key: sharded(name, slices[name].states[key]) for key in keys}
            for name in self.parameters
        }
        step = self.base.state[self._flat_partitions()[0]].get("step")
        groups = [
            {key: value for key, value in group.items() if key != "params"}
            for group in self.base.param_groups
        ]
        return {
            "model": model,
            "optimizer": {
                "state": states,
                "param_groups": groups,
                "step": float(step) if step is not None else 0.0,
            },
            SECTION: {
                SHAPES: {name: list(self._shape(name)) for name in self.parameters},
                **{name: int(getattr(self.engine, name)) for name in _COUNTERS},
            },
        }

    def _numel(self, name: str) -> int:
        parameter = self.parameters[name]
        return int(getattr(parameter, "ds_numel", parameter.numel()))

    def _shape(self, name: str) -> torch.Size:
        parameter = self.parameters[name]
        return torch.Size(getattr(parameter, "ds_shape", parameter.shape))

    def _buffers(self) -> dict[str, torch.Tensor]:
        """Persistent buffers (e.g. BatchNorm statistics): whole on every rank under ZeRO."""
        module = self.engine.module
        names = {name for name, _ in module.named_parameters()}
        return {
            name: value
            for name, value in module.state_dict(keep_vars=True).items()
            if name not in names and isinstance(value, torch.Tensor)
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Finish a DCP load into `state_dict()`'s views: copy the float32 master weights into
        the parameters the model computes with, and restore hyper-parameters and counters."""
        if self.zero3:
            for name, piece in self._slices([]).items():
                partition = self.parameters[name].ds_tensor
                partition.data[: piece.master.numel()].copy_(piece.master)
        else:
            self.zero.update_lp_params()  # each rank's slice, then all-gathered to all ranks
        optimizer = state["optimizer"]
        for group, saved in zip(self.base.param_groups, optimizer["param_groups"], strict=True):
            group.update(saved)
        for flat in self._flat_partitions():
            step = self.base.state[flat].get("step")
            if isinstance(step, torch.Tensor):
                step.fill_(optimizer["step"])
            elif step is not None:
                self.base.state[flat]["step"] = optimizer["step"]
        for name in _COUNTERS:
            setattr(self.engine, name, state[SECTION][name])
