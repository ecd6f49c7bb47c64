"""checkpoint.json: what a checkpoint holds, written last, so it also marks it complete.

It records where training was (step, epoch, batches into the epoch), how many processes
saved it, and the size and CRC-32 of every file, so that a truncated or garbled file is
found before anything is loaded. Plain JSON: readable without torch (status, doctor).
"""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scaletrain.core.errors import ScaletrainError

MANIFEST_NAME = "checkpoint.json"
FORMAT_VERSION = 1
# Files are checksummed in pieces of this size (bytes) so that memory use stays flat.
_CHUNK_BYTES = 16 * 1024 * 1024


class DamagedCheckpointError(ScaletrainError):
    """A checkpoint's files do not match its manifest, or the manifest is unreadable."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Position:
    """Where training is: the same on every rank and for any number of ranks."""

    step: int = 0
    """Optimizer steps completed."""
    epoch: int = 0
    """The epoch in progress (or the next one, when none has started)."""
    batches_in_epoch: int = 0
    """Steps of that epoch already done; a resumed run skips them, in the same order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FileDigest:
    size: int
    """Bytes."""
    crc32: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    position: Position
    world_size: int
    """Processes that saved it; resuming with another number is allowed."""
    reason: str
    """Why it was saved: 'every 100 steps', 'every 30 minutes', 'stop: SIGTERM', 'end'..."""
    saved_at: str
    """ISO-8601 UTC."""
    files: dict[str, FileDigest] = field(default_factory=dict)
    """Every file of the checkpoint, relative to its folder."""
    versions: dict[str, str] = field(default_factory=dict)

    def write(self, folder: Path) -> None:
        """Write checkpoint.json into `folder` and fsync it (the folder is published after)."""
        record = {"format": FORMAT_VERSION, **asdict(self)}
        with (folder / MANIFEST_NAME).open("w") as file:
            file.write(json.dumps(record, indent=1) + "\n")
            file.flush()
            os.fsync(file.fileno())

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """The manifest of `folder`; anything unreadable or out of range is damage."""
        from pydantic import TypeAdapter, ValidationError

        try:
            record = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            record.pop("format", None)
            manifest = TypeAdapter(cls).validate_python(record)
            if manifest.world_size < 1 or min(asdict(manifest.position).values()) < 0:
                raise ValueError("world_size below 1 or a negative position")
            return manifest
        except ValidationError as error:
            problem = "; ".join(
                f"{'.'.join(map(str, detail['loc']))}: {detail['msg']}" for detail in error.errors()
            )
        except (OSError, ValueError) as error:
            problem = str(error)
        raise DamagedCheckpointError(
            f"The checkpoint {folder} has an unreadable {MANIFEST_NAME} ({problem}).",
            "scaletrain resumes from the previous complete checkpoint; move this one away.",
        )


def digest(path: Path) -> FileDigest:
    """Size and CRC-32 of a file (zlib's CRC runs at about 2 GB/s and releases the GIL)."""
    crc = 0
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            crc = zlib.crc32(chunk, crc)
    return FileDigest(size=path.stat().st_size, crc32=crc)


def _read_one(path: Path, want: FileDigest) -> tuple[str | None, bytes | None]:
    """(the problem, None) or (None, the file's bytes)."""
    if not path.is_file():
        return f"{path.name} is missing", None
    if (size := path.stat().st_size) != want.size:
        return f"{path.name} has {size:,} bytes instead of {want.size:,}", None
    content = path.read_bytes()
    if zlib.crc32(content) != want.crc32:
        return f"{path.name} does not match its checksum", None
    return None, content


def read_checked(
    folder: Path, expected: dict[str, FileDigest], *, threads: int = 1
) -> tuple[list[str], dict[str, bytes]]:
    """Read the files of `expected` once, into memory, and check each against its digest;
    `threads` files at a time (reads and zlib's CRC-32 release the GIL, so one file's
    checksum runs while another is read).

    Returns one line per file that is missing, of another size or garbled, and the contents
    of the intact ones (for loading them without reading them again).
    """
    names = list(expected)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(names) or 1))) as pool:
        results = pool.map(lambda name: _read_one(folder / name, expected[name]), names)
        checked = dict(zip(names, results, strict=True))
    problems = [problem for problem, _ in checked.values() if problem is not None]
    contents = {name: content for name, (_, content) in checked.items() if content is not None}
    return problems, contents
