"""Read DCP checkpoints without unpickling arbitrary objects.

torch.distributed.checkpoint unpickles its `.metadata` file with plain `pickle` and its
non-tensor values (optimizer hyper-parameters, scheduler state) with
`torch.load(weights_only=False)`: a crafted checkpoint could run code on load. Here the
metadata is checked against an allowlist of DCP's own metadata classes and every non-tensor
value must load with `weights_only=True` before DCP is allowed to read it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import ReadItem

METADATA_NAME = ".metadata"

# Everything else DCP's metadata pickles refer to; the classes of the metadata module itself
# are allowed as a whole.
_ALLOWED_GLOBALS = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("collections", "OrderedDict"),
    # StorageMeta records where the checkpoint was first written.
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == dcp_metadata.__name__ and isinstance(getattr(dcp_metadata, name, None), type):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in checkpoint metadata")


def check_metadata(folder: Path) -> None:
    """Raise if the folder's DCP metadata refers to anything but DCP's metadata classes."""
    with (folder / METADATA_NAME).open("rb") as file:
        loaded = _MetadataUnpickler(file).load()
    if not isinstance(loaded, Metadata):
        raise pickle.UnpicklingError(f"{METADATA_NAME} holds a {type(loaded).__name__}")


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader, with the metadata checked before DCP unpickles it."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        check_metadata(Path(self.path))
        return super().read_metadata(*args, **kwargs)


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, with non-tensor values restricted to plain data and tensors."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        torch.load(value, weights_only=True)  # raises on anything else
        value.seek(0)
        super().load_bytes(read_item, value)
