"""Loading a checkpoint never unpickles arbitrary objects (DCP alone would)."""

from __future__ import annotations

import os
import pickle
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save

from scaletrain.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner, check_metadata

# DCP without a process group says so on every call.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class RunsACommand:
    """What a crafted pickle can do: call any function when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def saved(folder: Path, extra: object, placeholder: object) -> dict[str, Any]:
    """Save weights and `extra` with plain DCP; return a state dict to load into, holding
    zeros and `placeholder` (not what was saved: only a load can put the saved values there)."""
    assert placeholder != extra
    save({"weights": torch.arange(6.0), "extra": extra}, checkpoint_id=folder, no_dist=True)
    return {"weights": torch.zeros(6), "extra": placeholder}


def test_dcp_metadata_passes_and_a_crafted_one_is_refused_unrun(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    saved(folder, extra=[1, 2.5, "lr"], placeholder=None)
    check_metadata(folder)  # DCP's own metadata classes only
    marker = tmp_path / "pwned"
    (folder / ".metadata").write_bytes(pickle.dumps(RunsACommand(marker)))
    with pytest.raises(pickle.UnpicklingError, match=r"system is not allowed"):
        check_metadata(folder)
    with pytest.raises(CheckpointException, match=r"system is not allowed"):
        load(
            saved(tmp_path / "other", 0, placeholder=1),
            storage_reader=SafeFileSystemReader(folder),
            no_dist=True,
        )
    assert not marker.exists()


def test_plain_values_and_tensors_load(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    target = saved(
        folder,
        extra={"betas": (0.9, 0.999), "lr": 0.1, "name": None},
        placeholder={"betas": (0.0, 0.0), "lr": 0.0, "name": "x"},
    )
    load(
        target, storage_reader=SafeFileSystemReader(folder), planner=SafeLoadPlanner(), no_dist=True
    )
    assert torch.equal(target["weights"], torch.arange(6.0))
    assert target["extra"] == {"betas": (0.9, 0.999), "lr": 0.1, "name": None}


def test_other_objects_are_refused_where_dcp_would_unpickle_them(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    target = saved(folder, extra=Fraction(1, 3), placeholder=Fraction(0))
    unsafe = dict(target)
    load(
        unsafe, storage_reader=FileSystemReader(folder), planner=DefaultLoadPlanner(), no_dist=True
    )
    assert unsafe["extra"] == Fraction(1, 3)  # plain DCP unpickled the saved class
    with pytest.raises(CheckpointException, match=r"Weights only load failed"):
        load(
            target,
            storage_reader=SafeFileSystemReader(folder),
            planner=SafeLoadPlanner(),
            no_dist=True,
        )
    assert target["extra"] == Fraction(0)  # nothing of the refused value was loaded
