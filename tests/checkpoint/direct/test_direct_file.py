"""Checkpoint files written around the page cache: the bytes on disk are exactly the bytes
written, whatever their sizes and flushes, with O_DIRECT where the file system takes it and
through the page cache where it does not."""

from __future__ import annotations

import errno
import mmap
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scaletrain.checkpoint.direct.direct_file import ALIGNMENT, CHUNK_BYTES, DirectFile
from tests.conftest import REPO


def takes_direct_io(folder: Path) -> bool:
    """Asked of the file system itself, apart from the code under test."""
    probe = folder / "probe"
    try:
        descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0))
    except OSError as error:
        assert error.errno == errno.EINVAL
        return False
    os.close(descriptor)
    probe.unlink()
    return hasattr(os, "O_DIRECT")


def write_in_pieces(path: Path, sizes: list[int], flush_after: set[int]) -> tuple[bytes, bool]:
    """Random bytes in pieces of `sizes`, flushing after the pieces numbered in
    `flush_after`; what was written, and whether the file was direct."""
    generator = random.Random(sum(sizes))
    written = bytearray()
    with DirectFile(path) as file:
        for number, size in enumerate(sizes):
            piece = generator.randbytes(size)
            assert file.write(piece) == size
            written += piece
            assert file.tell() == len(written)
            if number in flush_after:
                file.flush()
                assert path.stat().st_size == len(written)  # on disk, not longer
        direct = file.direct
    return bytes(written), direct


PIECES = {
    "empty": ([], set()),
    "one byte": ([1], set()),
    "one block short and long": ([ALIGNMENT - 1, ALIGNMENT + 1], set()),
    "a chunk and a bit in odd pieces": ([CHUNK_BYTES - 3, 7, 100_003, 1], set()),
    "several chunks at once": ([3 * CHUNK_BYTES + 12_345], set()),
    "flushed mid-block, then more": ([5_000, 10, 3 * ALIGNMENT, 77], {0, 1, 2}),
    "flushed at a block boundary": ([2 * ALIGNMENT, 9], {0}),
}


@pytest.mark.parametrize("sizes, flush_after", PIECES.values(), ids=PIECES.keys())
def test_the_file_holds_exactly_the_bytes_written(
    tmp_path: Path, sizes: list[int], flush_after: set[int]
) -> None:
    path = tmp_path / "shard.distcp"
    written, direct = write_in_pieces(path, sizes, flush_after)
    assert path.read_bytes() == written
    assert direct == takes_direct_io(tmp_path)


FALLBACK_CHECK = """
import sys
from pathlib import Path
from tests.checkpoint.direct.test_direct_file import takes_direct_io, write_in_pieces
folder = Path(sys.argv[1])
assert not takes_direct_io(folder), "ramfs took O_DIRECT"
written, direct = write_in_pieces(folder / "shard.distcp", [5_000, 8 * 1024 * 1024 + 1], {0})
assert not direct
assert (folder / "shard.distcp").read_bytes() == written
print("buffered, exact")
"""


def test_a_file_system_without_direct_io_gets_a_buffered_file(tmp_path: Path) -> None:
    # ramfs has no direct I/O (tmpfs has it since Linux 6.6); mounted in a mount namespace
    # of its own, it disappears with the child.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a ramfs")
    folder = tmp_path / "ramfs"
    folder.mkdir()
    script = (
        f"mount -t ramfs ramfs {folder} && exec \"{sys.executable}\" -c '{FALLBACK_CHECK}' {folder}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "buffered, exact"


@pytest.mark.parametrize("size", [0, 1, ALIGNMENT, 3 * CHUNK_BYTES + ALIGNMENT + 5])
def test_a_page_aligned_buffer_is_written_whole_from_its_own_memory(
    tmp_path: Path, size: int
) -> None:
    content = random.Random(size).randbytes(size)
    memory = mmap.mmap(-1, max(size, 1))  # anonymous memory starts at a page
    memory[:size] = content
    path = tmp_path / "shard.distcp"
    with DirectFile(path) as file:
        file.write_aligned(memoryview(memory)[:size])
        assert file.tell() == size
        direct = file.direct
    assert path.read_bytes() == content
    assert direct == takes_direct_io(tmp_path)


def test_two_files_open_in_one_thread_keep_their_own_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    with DirectFile(first) as one, DirectFile(second) as two:
        one.write(b"a" * (ALIGNMENT + 5))
        two.write(b"b" * (ALIGNMENT + 7))
        one.write(b"A" * 3)
    assert first.read_bytes() == b"a" * (ALIGNMENT + 5) + b"AAA"
    assert second.read_bytes() == b"b" * (ALIGNMENT + 7)


def test_a_missing_folder_is_the_usual_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DirectFile(tmp_path / "missing" / "shard.distcp")
