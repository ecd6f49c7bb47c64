"""Where checkpoints live and how one becomes visible: runs/<name>/checkpoints/.

    step-0000120/           complete: DCP files (.metadata, __<rank>_<n>.distcp), checkpoint.json
    step-0000130.partial/   being written, or left by a crash: never loaded
    step-0000100.damaged/   failed verification on resume: kept for inspection, never loaded
    LATEST                  name of the newest complete checkpoint, for people and tools

Every rank writes into `.partial`; once all have finished, rank 0 writes checkpoint.json
into it and renames it (atomic on POSIX file systems, Lustre and GPFS included), then
replaces LATEST. A crash at any moment therefore leaves the previous checkpoint complete.
No torch here: login-node tools read checkpoints through this module too.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from scaletrain.checkpoint.manifest import MANIFEST_NAME

LATEST_NAME = "LATEST"
PARTIAL_SUFFIX = ".partial"
DAMAGED_SUFFIX = ".damaged"
# A checkpoint being deleted by retention: renamed first so that a crash half-way through
# the deletion never leaves something that looks complete.
DELETING_SUFFIX = ".deleting"
_COMPLETE_NAME = re.compile(r"step-(\d+)")
# The rank that wrote a file, from its name: DCP names its shards __<rank>_<n>.distcp.
_WRITER_OF_FILE = re.compile(r"__(\d+)_")


def checkpoint_name(step: int) -> str:
    """`step-0000120`: seven digits sort well up to ten million steps (wider after that)."""
    return f"step-{step:07d}"


def step_of(folder: Path) -> int | None:
    """The step of a complete checkpoint folder's name, None for any other name."""
    match = _COMPLETE_NAME.fullmatch(folder.name)
    return int(match.group(1)) if match else None


def files_of_rank(names: set[str], rank: int, world_size: int) -> list[str]:
    """The share of a checkpoint's files that `rank` checksums: those it wrote (still in its
    page cache), and on rank 0 anything not named by rank. With another number of ranks
    than saved it, the files are spread evenly."""
    owned = []
    for name in sorted(names):
        match = _WRITER_OF_FILE.match(name)
        writer = int(match.group(1)) % world_size if match else 0
        if writer == rank:
            owned.append(name)
    return owned


def fsync_folder(folder: Path) -> None:
    """Make the files created and renamed inside `folder` durable (a crash must not undo them)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_durably(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically: readers see the old or the new file, never half."""
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    temporary.replace(path)
    fsync_folder(path.parent)


@dataclass(frozen=True, slots=True)
class CheckpointStore:
    """The checkpoints folder of one run."""

    root: Path

    def partial(self, step: int) -> Path:
        return self.root / f"{checkpoint_name(step)}{PARTIAL_SUFFIX}"

    def complete(self) -> list[Path]:
        """Complete checkpoints, newest first (a folder with a step name and a manifest)."""
        if not self.root.is_dir():
            return []
        found = [
            (step, folder)
            for folder in self.root.iterdir()
            if (step := step_of(folder)) is not None and (folder / MANIFEST_NAME).is_file()
        ]
        return [folder for _, folder in sorted(found, reverse=True)]

    def damaged(self) -> list[Path]:
        """Checkpoints set aside as damaged (`set_aside`), kept for inspection."""
        if not self.root.is_dir():
            return []
        return sorted(path for path in self.root.iterdir() if DAMAGED_SUFFIX in path.name)

    def latest(self) -> Path | None:
        """The checkpoint LATEST names, if it is still complete."""
        pointer = self.root / LATEST_NAME
        if not pointer.is_file():
            return None
        # A damaged pointer names no complete checkpoint: then there is no latest one.
        folder = self.root / pointer.read_text(errors="replace").strip()
        return folder if folder in self.complete() else None

    def publish(self, step: int) -> Path:
        """Make the finished `.partial` folder of `step` the newest complete checkpoint."""
        final = self.root / checkpoint_name(step)
        self.partial(step).rename(final)
        # Its fsync of the checkpoints folder makes the rename above durable too.
        write_durably(self.root / LATEST_NAME, final.name + "\n")
        return final

    def prune(self, keep: int) -> list[Path]:
        """Delete all but the newest `keep` complete checkpoints; return what was deleted."""
        deleted = self.complete()[keep:]
        for folder in deleted:
            doomed = folder.with_name(folder.name + DELETING_SUFFIX)
            folder.rename(doomed)
            shutil.rmtree(doomed)
        return deleted

    def remove_unfinished(self) -> None:
        """Remove what crashed saves and deletions left behind (never complete or damaged)."""
        if self.root.is_dir():
            for folder in self.root.iterdir():
                if folder.name.endswith((PARTIAL_SUFFIX, DELETING_SUFFIX)):
                    shutil.rmtree(folder)

    def set_aside(self, folder: Path) -> Path:
        """Rename a damaged checkpoint so that it is never loaded again; nothing is deleted."""
        target = folder.with_name(folder.name + DAMAGED_SUFFIX)
        number = 1
        while target.exists():
            number += 1
            target = folder.with_name(f"{folder.name}{DAMAGED_SUFFIX}-{number}")
        folder.rename(target)
        return target
