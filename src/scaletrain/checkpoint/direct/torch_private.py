"""Every private torch entry point the direct storage uses, and the torch versions it was
tested on. On any other version the direct storage is not used (storage.py: the run saves
and loads through DCP's public API and says so in one line), since a change in torch's
layouts could place bytes wrongly under a matching checksum.

Imported here:
- `_StorageInfo`: where an item lies in a file, in DCP's write results and metadata;
- `_create_file_view`: DCP's view of one item of a file, which torch.load parses;
- `narrow_tensor_by_index`: a stored tensor cut to the piece a rank loads;
- torch's zip reader (`torch._C.PyTorchFileReader.get_record_offset`): where a stored
  tensor's data begins inside its item.

Relied on without an import:
- torch.save's byte layout: a tensor's data in one write of its size, at a multiple of 64
  bytes, headers depending on its dtype, shape and strides only (file_image.py);
- DCP's file names (`<prefix>0.distcp`, one file per rank) and its `FileSystemWriter.fs`
  attribute, replaced by a file system that checksums while writing (writer.py);
- `FileSystemWriter.set_up_storage_writer(is_coordinator, rank=..., use_collectives=...)`,
  which torch 2.7 does not take (plan_cache.py).
"""

from __future__ import annotations

import io
from typing import IO, cast

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import _StorageInfo as StorageInfo
from torch.distributed.checkpoint.utils import _create_file_view

TESTED_TORCH_VERSIONS = ("2.14.1",)
"""Releases (without a local part such as +cu130) the direct storage's tests passed on."""

__all__ = ["TESTED_TORCH_VERSIONS", "StorageInfo", "item_view", "narrow_tensor_by_index"]


def item_view(file: IO[bytes], info: StorageInfo) -> IO[bytes]:
    """One stored item of an open file, as a file of its own (reads from the file's position)."""
    return cast(IO[bytes], _create_file_view(cast(io.IOBase, file), info.offset, info.length))


def data_offset(item: IO[bytes]) -> tuple[int, list[str]]:
    """Where the one storage record of a torch.save'd item starts, and the names of its
    storage records (one for a tensor saved alone)."""
    reader = torch._C.PyTorchFileReader(item)
    records = [name for name in reader.get_all_records() if name.startswith("data/")]
    if len(records) != 1:
        return -1, records
    # torch.load(mmap=True) uses it too; torch's stubs do not list it.
    return reader.get_record_offset(records[0]), records  # type: ignore[attr-defined]
