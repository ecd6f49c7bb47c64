"""`scaletrain export`: one consolidated weights file from a run's checkpoint, for inference."""

from __future__ import annotations

from pathlib import Path

import typer

from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.cli.common import JSON_OPTION, RUN_ARGUMENT, RUNS_DIR_OPTION
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import find_run

_DTYPES = ("fp32", "bf16", "fp16")


def export(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    checkpoint: str | None = typer.Option(
        None, "--checkpoint", help="A step-N folder of the run (default: the newest)."
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="File to write; .safetensors or .pt (default: runs/<name>/export/model-<step>.pt).",
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help=f"Cast floating-point weights: {', '.join(_DTYPES)}."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write a run's model weights from a checkpoint as one file for inference.

    Works for checkpoints of every strategy (DDP, FSDP, HSDP, DeepSpeed ZeRO) and any
    number of processes; needs PyTorch, not the GPUs or processes that trained it.

    Example: [bold]scaletrain export gpt --dtype bf16[/bold]
    """
    if dtype is not None and dtype not in _DTYPES:
        raise ScaletrainError(f"Unknown --dtype {dtype!r}.", f"use one of {', '.join(_DTYPES)}.")
    folder = find_run(runs_dir, run_name)
    store = CheckpointStore(folder.checkpoints)
    complete = store.complete()  # never a .partial or .damaged folder
    named = [path for path in complete if path.name == checkpoint]
    source = (named[0] if named else None) if checkpoint else store.latest()
    if source is None:
        known = ", ".join(path.name for path in complete) or "none"
        raise ScaletrainError(
            f"Run {folder.name} has no checkpoint {checkpoint or ''}".rstrip() + " to export.",
            f"name one of its complete checkpoints with --checkpoint (there: {known}).",
        )
    try:
        from scaletrain.checkpoint.export import export_model
    except ImportError as error:
        raise ScaletrainError(
            f"Exporting needs PyTorch, which this Python cannot import ({error}).",
            "run scaletrain export where torch is installed (your container or module).",
        ) from None
    target = output or folder.root / "export" / f"model-{source.name}.pt"
    exported = export_model(source, target, dtype=dtype)
    if as_json:
        console.show_json(
            {
                "checkpoint": str(source),
                "path": str(exported.path),
                "tensors": exported.tensors,
                "values": exported.parameters,
                "bytes": exported.size_bytes,
                "dtype": dtype,
            }
        )
        return
    console.success(
        f"exported {source} → {exported.path}: {exported.tensors} tensors, "
        f"{exported.parameters:,} values, {exported.size_bytes / 1e6:,.1f} MB"
    )
    console.show_text(f"{exported.path}\n")
