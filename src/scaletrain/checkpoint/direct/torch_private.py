"""Every private torch entry point the direct storage uses, and the torch versions it was
tested on. On any other version the direct storage is not used (storage.py: the run saves
through DCP's public API and says so in one line), since a change in torch's layouts could
place bytes wrongly under a matching checksum.

Imported here:
- `_StorageInfo`: where an item lies in a file, in the write results DCP's metadata holds.

Relied on without an import:
- torch.save's byte layout: a tensor's data in one write of its size, at a multiple of 64
  bytes, headers depending on its dtype, shape and strides only (file_image.py);
- DCP's file names (`<prefix>0.distcp`, one file per rank) and its `FileSystemWriter.fs`
  attribute, replaced by a file system that checksums while writing (writer.py);
- `FileSystemWriter.set_up_storage_writer(is_coordinator, rank=..., use_collectives=...)`,
  which torch 2.7 does not take (plan_cache.py);
- `torch.cuda.cudart().cudaHostRegister`, to page-lock the file image (file_image.py).
"""

from __future__ import annotations

from torch.distributed.checkpoint.filesystem import _StorageInfo as StorageInfo

TESTED_TORCH_VERSIONS = ("2.14.1",)
"""Releases (without a local part such as +cu130) the direct storage's tests passed on."""

__all__ = ["TESTED_TORCH_VERSIONS", "StorageInfo"]
