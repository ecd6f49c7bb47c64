"""The checkpoint writer's files: checksums taken while writing match the files on disk, the
files stay DCP's own format, and the writer's options follow the rank's share."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from scaletrain.checkpoint.manifest import Manifest, digest
from scaletrain.checkpoint.storage import (
    BYTES_PER_WRITER_THREAD,
    state_bytes,
    writer_options,
)
from scaletrain.checkpoint.writer import RANK_STATE_KEY
from tests.checkpoint.conftest import save_alone

MB = 1024 * 1024


def test_checksums_taken_while_writing_match_the_files_and_dcp_reads_them(tmp_path: Path) -> None:
    state = {f"layer{i}": torch.randn(512, 1024) for i in range(6)}  # 12.6 MB
    folder = save_alone(tmp_path, state, cores=2)
    manifest = Manifest.read(folder)
    on_disk = {
        path.relative_to(folder).as_posix(): digest(path)
        for path in folder.rglob("*")
        if path.is_file() and path.name != "checkpoint.json"
    }
    assert manifest.files == on_disk
    # Plain DCP loads it: scaletrain's files are DCP's format, random states included.
    loaded = {"model": {name: torch.zeros_like(value) for name, value in state.items()}}
    loaded[RANK_STATE_KEY] = {"0": ""}
    dcp.load(loaded, checkpoint_id=folder, no_dist=True)
    assert all(torch.equal(loaded["model"][name], state[name]) for name in state)
    assert '"python"' in loaded[RANK_STATE_KEY]["0"]
    # torch.save's record checksums were off only while the checkpoint was written.
    assert torch.serialization.get_crc32_options() is True


def test_writer_threads_follow_the_share_and_the_cores() -> None:
    assert writer_options(10 * MB, cores=8, staged=False).thread_count == 1
    assert writer_options(3 * BYTES_PER_WRITER_THREAD, cores=8, staged=False).thread_count == 3
    assert writer_options(3 * BYTES_PER_WRITER_THREAD, cores=2, staged=False).thread_count == 2
    assert writer_options(100 * BYTES_PER_WRITER_THREAD, cores=64, staged=False).thread_count == 4


def test_a_staged_state_is_written_without_any_gpu_stream() -> None:
    # DCP's writer copies ahead from the GPU on a stream of the thread's current device
    # unless per_thread_copy_ahead is 0; a staged state is on the CPU already.
    options = writer_options(100 * BYTES_PER_WRITER_THREAD, cores=64, staged=True)
    assert (options.thread_count, options.per_thread_copy_ahead) == (1, 0)
    assert writer_options(10 * MB, cores=8, staged=False).per_thread_copy_ahead > 0


def test_state_bytes_counts_the_tensors_of_nested_state() -> None:
    state = {"model": {"w": torch.zeros(256, 256)}, "optimizer": {"state": [torch.zeros(10)]}}
    assert state_bytes(state) == 256 * 256 * 4 + 40
