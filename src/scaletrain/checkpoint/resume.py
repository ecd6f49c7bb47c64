"""Find the newest intact checkpoint of a run and load it into the training objects.

Before anything is loaded, every rank checks its share of the files (those it wrote, when
the number of ranks is unchanged: sizes and CRC-32) and rank 0 checks DCP's metadata against
an allowlist; the ranks agree. DCP's `load` then reads the checkpoint, whichever storage
wrote it, and only then is its state put into the objects.

A damaged checkpoint is reported by name, renamed to step-N.damaged (nothing is deleted)
and the next older one is tried. An intact checkpoint that does not fit the model (the
script changed, or it moved between DeepSpeed and the torch-native strategies) is an error:
older checkpoints would not fit either, and silently starting over would lose training.
"""

from __future__ import annotations

import json
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from scaletrain.checkpoint.deepspeed_state import SECTION
from scaletrain.checkpoint.layout import files_of_rank
from scaletrain.checkpoint.manifest import (
    DamagedCheckpointError,
    Manifest,
    newer_torch_error,
    verify_files,
)
from scaletrain.checkpoint.process_switches import without_automatic_gc, without_dcp_collectives
from scaletrain.checkpoint.safe_load import (
    METADATA_NAME,
    SafeFileSystemReader,
    SafeLoadPlanner,
    check_metadata,
)
from scaletrain.checkpoint.state import TrainingObjects
from scaletrain.checkpoint.writer import RANK_STATE_KEY, SaveTarget
from scaletrain.core.errors import ScaletrainError

# Enough of a load error to name the mismatching keys without flooding the log.
_ERROR_CHARS = 1500
_TORCH_NATIVE = "DDP, FSDP, HSDP or one process"
_DEEPSPEED = "DeepSpeed ZeRO (strategy zero1, zero2 or zero3)"


@dataclass(frozen=True, kw_only=True, slots=True)
class Resumed:
    folder: Path
    manifest: Manifest
    rank_state: dict[str, Any] | None
    """This rank's saved generators; None when the checkpoint was saved by fewer ranks."""


def _from_rank_zero(value: Any, target: SaveTarget) -> Any:
    if target.world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=target.group)
    return box[0]


def _from_all_ranks(value: list[str], target: SaveTarget) -> list[str]:
    if target.world_size == 1:
        return value
    gathered: list[Any] = [None] * target.world_size
    dist.all_gather_object(gathered, value, group=target.group)
    return [item for part in gathered for item in part]


def _check(folder: Path, target: SaveTarget) -> list[str]:
    """What is wrong with this rank's share of a checkpoint (empty: nothing)."""
    try:
        manifest = Manifest.read(folder)
    except DamagedCheckpointError as error:
        return [error.problem] if target.rank == 0 else []
    mine = files_of_rank(set(manifest.files), target.rank, target.world_size)
    expected = {name: manifest.files[name] for name in mine}
    # DCP reads the metadata itself, to plan the load: it is checked whole (small) before.
    problems = verify_files(folder, expected)
    if METADATA_NAME in expected and not problems:
        try:
            check_metadata(folder)
        except (OSError, EOFError, pickle.UnpicklingError) as error:
            problems.append(f"{METADATA_NAME} cannot be read safely ({error})")
        except (ValueError, TypeError, AttributeError) as error:
            # Fields this torch does not know: damage, or a newer torch's (told apart after).
            problems.append(f"{METADATA_NAME} cannot be read by this torch ({error})")
    return problems


def _read(
    folder: Path, objects: TrainingObjects, target: SaveTarget, manifest: Manifest
) -> dict[str, Any]:
    """The checkpoint, read into the structure of `objects`' state."""
    state = objects.state_dict()  # the structure to fill, with this run's shapes
    if target.rank < manifest.world_size:
        state[RANK_STATE_KEY] = {str(target.rank): ""}
    try:
        with without_automatic_gc():
            dcp_load(
                state,
                storage_reader=SafeFileSystemReader(folder),
                planner=SafeLoadPlanner(),
                process_group=target.group,
                no_dist=without_dcp_collectives(target.world_size),
            )
    except (Exception, CheckpointException) as error:  # DCP's is a BaseException
        newer = newer_torch_error(folder, torch.__version__, error)
        raise (newer or _does_not_fit(folder, error, state)) from error
    return state


def _apply(folder: Path, objects: TrainingObjects, state: dict[str, Any], rank: int) -> Any:
    """Put an intact checkpoint's state into `objects`; return this rank's saved generators
    (None when the checkpoint was saved by fewer ranks)."""
    rank_state = state.pop(RANK_STATE_KEY, {}).get(str(rank))
    try:
        objects.load_state_dict(state)
    except Exception as error:
        raise _does_not_fit(folder, error, state) from error
    return json.loads(rank_state) if rank_state else None


def _does_not_fit(folder: Path, error: BaseException, state: dict[str, Any]) -> ScaletrainError:
    """The error for an intact checkpoint that `state` (what this run loads into) cannot take."""
    mismatch = _strategy_mismatch(folder, into_deepspeed=SECTION in state)
    if mismatch is not None:
        return mismatch
    return ScaletrainError(
        f"The checkpoint {folder} is intact but does not fit this training script: "
        f"{str(error)[:_ERROR_CHARS]}",
        "resume with the model, optimizer, scheduler and scaler that saved it, or start "
        "a new run (another --name); move the checkpoints folder away to start over.",
    )


def _set_aside(folder: Path, problems: list[str], target: SaveTarget) -> None:
    if target.rank == 0:
        moved = target.store.set_aside(folder)
        print(
            # Each damaged file once, also when more than one rank read it.
            f"scaletrain: checkpoint {folder} is damaged: {'; '.join(dict.fromkeys(problems))}. "
            f"Renamed it to {moved.name}; trying the previous one.",
            file=sys.stderr,
            flush=True,
        )


def _strategy_mismatch(folder: Path, *, into_deepspeed: bool) -> ScaletrainError | None:
    """The error for a checkpoint of DeepSpeed loaded without it, or the other way round.

    DeepSpeed's state is each parameter flattened, with an optimizer step of its own
    (deepspeed_state.py); DDP/FSDP/HSDP's is DCP's state dict of whole-shaped tensors. DCP
    cannot reshape one into the other. Asked only after a load failed: no cost otherwise.
    """
    metadata = SafeFileSystemReader(folder).read_metadata()  # already checked: intact
    saved_by_deepspeed = any(
        key.split(".", 1)[0] == SECTION for key in metadata.state_dict_metadata
    )
    if saved_by_deepspeed == into_deepspeed:
        return None
    saved_by, now = (
        (_DEEPSPEED, _TORCH_NATIVE) if saved_by_deepspeed else (_TORCH_NATIVE, _DEEPSPEED)
    )
    same_kind = "'zero1', 'zero2' or 'zero3'" if saved_by_deepspeed else "'ddp', 'fsdp' or 'hsdp'"
    run = folder.parent.parent
    return ScaletrainError(
        f"The checkpoint {folder} was saved by {saved_by}, and this run trains with {now}: "
        "DeepSpeed keeps weights and optimizer state in flat partitions of its own, and the "
        "two layouts do not load into each other.",
        f"resume this run with strategy={same_kind} (any of them, at any number of "
        f"processes). To switch, `scaletrain export --runs-dir {run.parent} {run.name}` "
        "writes its weights as one file: load that into your model before st.wrap and start "
        "a new run (another --name); the optimizer starts afresh.",
    )


def load_newest(objects: TrainingObjects, target: SaveTarget) -> Resumed | None:
    """Load the newest intact checkpoint on every rank (a collective); None if there is none."""
    store = target.store
    found = ([folder.name for folder in store.complete()], bool(store.damaged()))
    names, any_damaged = _from_rank_zero(found, target)
    for name in names:
        folder = store.root / name
        problems = _from_all_ranks(_check(folder, target), target)
        if problems:
            newer = newer_torch_error(folder, torch.__version__, RuntimeError(problems[0]))
            if newer is not None:
                raise newer  # on every rank: they all saw the same problems
            _set_aside(folder, problems, target)
            continue
        manifest = Manifest.read(folder)
        state = _read(folder, objects, target, manifest)
        rank_state = _apply(folder, objects, state, target.rank)
        return Resumed(folder=folder, manifest=manifest, rank_state=rank_state)
    if names or any_damaged:
        # Also when an earlier attempt set them all aside: an elastic restart or a requeue
        # must not quietly train from scratch in the run that holds them.
        raise ScaletrainError(
            f"Every checkpoint in {store.root} is damaged (set aside as step-*.damaged); none "
            "was loaded, none was deleted, and the run does not start over by itself.",
            "look at the step-*.damaged folders (see the messages above); move the checkpoints "
            "folder away to start this run over, or restore a copy.",
        )
    return None
