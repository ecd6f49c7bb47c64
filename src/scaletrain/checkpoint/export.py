"""One consolidated file of a checkpoint's model weights, for inference on one device.

The checkpoint may come from any strategy and number of processes: DCP assembles each full
tensor from the shards on disk, in this one process (no process group). DeepSpeed's
flattened parameters get their shapes back. Only the model is read, not the optimizer.

    model.load_state_dict(torch.load("model-step-0000120.pt", weights_only=True))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from scaletrain.checkpoint.deepspeed_state import SECTION, SHAPES
from scaletrain.checkpoint.manifest import newer_torch_error
from scaletrain.checkpoint.process_switches import without_dcp_collectives
from scaletrain.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner
from scaletrain.core.errors import ScaletrainError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, slots=True)
class Exported:
    path: Path
    tensors: int
    parameters: int
    """Elements of all tensors (parameters and buffers)."""
    size_bytes: int


def read_model(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The full model weights of a checkpoint folder, by parameter name."""
    reader = SafeFileSystemReader(checkpoint)
    try:
        metadata = reader.read_metadata()
    except (ValueError, TypeError, AttributeError) as error:
        newer = newer_torch_error(checkpoint, torch.__version__, error)
        if newer is None:
            raise
        raise newer from error
    paths = metadata.planner_data or {}
    model: dict[str, Any] = {}
    shapes: dict[str, Any] = {}
    for key, entry in metadata.state_dict_metadata.items():
        path = paths.get(key, tuple(key.split(".", 1)))
        if path[0] == "model" and isinstance(entry, TensorStorageMetadata):
            model[str(path[1])] = torch.empty(entry.size, dtype=entry.properties.dtype)
        elif path[:2] == (SECTION, SHAPES) and isinstance(entry, BytesStorageMetadata):
            shapes[str(path[2])] = None  # filled by the load below
    if not model:
        raise ScaletrainError(
            f"{checkpoint} holds no model weights.",
            "export a checkpoint written by scaletrain's Checkpointer (step-N folders).",
        )
    state: dict[str, Any] = {"model": model}
    if shapes:
        state[SECTION] = {SHAPES: shapes}
    dcp_load(
        state,
        storage_reader=reader,
        planner=SafeLoadPlanner(),
        no_dist=without_dcp_collectives(world_size=1),  # one process reads it all
    )
    # DeepSpeed saves each parameter flattened; its shape was saved beside it.
    return {
        name: tensor.view(state[SECTION][SHAPES][name]) if name in shapes else tensor
        for name, tensor in state["model"].items()
    }


def export_model(checkpoint: Path, output: Path, *, dtype: str | None = None) -> Exported:
    """Write the checkpoint's model as one file: safetensors for a .safetensors name, else a
    torch.save'd state dict (load it with weights_only=True)."""
    model = read_model(checkpoint)
    if dtype is not None:
        model = {
            name: tensor.to(DTYPES[dtype]) if tensor.is_floating_point() else tensor
            for name, tensor in model.items()
        }
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    if output.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({name: tensor.contiguous() for name, tensor in model.items()}, str(partial))
    else:
        torch.save(model, partial)
    partial.replace(output)  # never a half-written file under the final name
    return Exported(
        path=output,
        tensors=len(model),
        parameters=sum(tensor.numel() for tensor in model.values()),
        size_bytes=output.stat().st_size,
    )
