"""The checkpoint writer's files: checksums taken while writing match the files on disk, the
files stay DCP's own format, and the writer's options follow the rank's share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from scaletrain.checkpoint.direct.file_image import IN_PLACE_MIN_BYTES, ITEM_ALIGNMENT, FileImage
from scaletrain.checkpoint.direct.storage import SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES, DirectStorage
from scaletrain.checkpoint.direct.writer import (
    BYTES_PER_WRITER_THREAD,
    state_bytes,
    writer_options,
)
from scaletrain.checkpoint.manifest import Manifest, digest
from scaletrain.checkpoint.safe_load import SafeFileSystemReader
from scaletrain.checkpoint.writer import RANK_STATE_KEY, BackgroundWriter
from tests.checkpoint.conftest import job_of, target_alone
from tests.checkpoint.direct.conftest import save_alone

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


def odd_state(seed: int, *, with_extra: bool) -> dict[str, torch.Tensor]:
    """Tensors an image must place right: large and small, transposed, a view of a larger
    storage, other dtypes, a scalar."""
    generator = torch.Generator().manual_seed(seed)
    wide = torch.randn(256, 1024, generator=generator)
    state = {
        "large": torch.randn(512, 1024, generator=generator),
        "transposed bf16": torch.randn(300, 700, generator=generator).bfloat16().t(),
        "columns of a larger one": wide[:, :300],
        "small": torch.randn(10, generator=generator),
        "counts": torch.randint(0, 1000, (40_000,), generator=generator),
        "step": torch.tensor(float(seed)),
    }
    if with_extra:
        state["extra"] = torch.randn(128, 1024, generator=generator)
    return state


def loaded(folder: Path, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What plain DCP reads from `folder` into tensors shaped like `state`'s."""
    into = {"model": {name: torch.zeros_like(value) for name, value in state.items()}}
    into[RANK_STATE_KEY] = {"0": ""}
    dcp.load(into, checkpoint_id=folder, no_dist=True)
    return into["model"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_file_built_in_memory_is_dcps_format_and_its_checksum_matches(tmp_path: Path) -> None:
    assert odd_state(0, with_extra=False)["small"].nbytes < IN_PLACE_MIN_BYTES
    image = FileImage()  # reused from save to save, as an asynchronous writer does
    # A larger state, then a smaller one (the memory keeps the first one's bytes), then again.
    for step, with_extra in [(1, True), (2, False), (3, True)]:
        state = odd_state(step, with_extra=with_extra)
        folder = save_alone(tmp_path, state, cores=2, step=step, image=image)
        files = [path for path in folder.rglob("*") if path.name != "checkpoint.json"]
        assert len([path for path in files if path.suffix == ".distcp"]) == 1
        assert Manifest.read(folder).files == {path.name: digest(path) for path in files}
        read = loaded(folder, state)
        assert all(torch.equal(read[name], state[name]) for name in state), step


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


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_copy_started_before_the_plan_gives_the_file_of_the_state_now(tmp_path: Path) -> None:
    # An asynchronous save starts copying training's tensors to where the previous save put
    # them before DCP's plan says where they go now; the file must hold the state now, also
    # when the plan moved them (a tensor before them gone).
    image = FileImage()
    state = odd_state(1, with_extra=True)
    save_alone(tmp_path, state, cores=2, step=1, image=image)
    for step, gone in [(2, None), (3, "extra"), (4, "large")]:
        for value in state.values():
            value.add_(1)  # training changed every tensor in place since the last save
        if gone is not None:
            del state[gone]
        image.start_early_copy(list(state.values()))
        folder = save_alone(tmp_path, state, cores=2, step=step, image=image)
        read = loaded(folder, state)
        assert all(torch.equal(read[name], state[name]) for name in state), step


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_training_let_go_after_the_early_copy_leaves_the_file_as_the_state_was(
    tmp_path: Path,
) -> None:
    # When every tensor the optimizer step changes had a place in the previous save, the
    # step is let go as soon as the early copy is over, before DCP's plan: the file must
    # hold the tensors as they were then, also when the plan moved them (a tensor staged at
    # the step boundary and placed before them, gone or new) and when that needs larger
    # memory.
    image = FileImage()
    # Empty tensors have no address (0): two of them must not pass for one.
    empty = {"no rows": torch.empty(0, 8), "no columns": torch.empty(8, 0)}
    stepped = odd_state(1, with_extra=False) | empty
    save_alone(tmp_path, {"a buffer": torch.randn(MB)} | stepped, cores=2, step=1, image=image)
    for step, staged in [
        (2, {}),  # moved back
        (3, {"a small buffer": torch.randn(64)}),  # moved on a little
        (4, {"a larger buffer": torch.randn(2 * MB)}),  # moved on, into more memory
    ]:
        let_go = threading.Event()
        image.start_early_copy(list(stepped.values()), copied=let_go.set)
        assert let_go.wait(timeout=60), step
        state = staged | {name: value.clone() for name, value in stepped.items()}
        writers_state = staged | stepped
        for value in stepped.values():
            value.add_(1)  # the next optimizer step
        folder = save_alone(tmp_path, writers_state, cores=2, step=step, image=image)
        read = loaded(folder, state)
        assert all(torch.equal(read[name], state[name]) for name in state), step
    # A tensor the previous save did not place: the step waits for the file's build.
    let_go = threading.Event()
    image.start_early_copy([*stepped.values(), torch.randn(100)], copied=let_go.set)
    image.wait_for_early_copy()
    assert not let_go.is_set()


class Marked(torch.Tensor):
    """A tensor subclass: torch.save writes it whole, by its own rules."""


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize(
    ("planned", "error"),
    [
        (lambda weight: weight.t(), "copied early with another layout"),
        (lambda weight: weight.as_subclass(Marked), "serializes whole a tensor"),
    ],
    ids=["transposed", "a subclass, serialized whole"],
)
def test_a_plan_that_takes_a_let_go_tensor_otherwise_abandons_the_save(
    tmp_path: Path, planned: Callable[[torch.Tensor], torch.Tensor], error: str
) -> None:
    # Its bytes as they were are only in the early copy, as another tensor: the save fails
    # rather than write what training changed since, and the previous checkpoint stays.
    image = FileImage()
    weight = torch.randn(512, 1024)
    saved = {"weight": weight.clone()}
    save_alone(tmp_path, {"weight": weight}, cores=2, step=1, image=image)
    let_go = threading.Event()
    image.start_early_copy([weight], copied=let_go.set)
    assert let_go.wait(timeout=60)
    weight.add_(1)
    with pytest.raises(CheckpointException, match=error):
        save_alone(tmp_path, {"weight": planned(weight)}, cores=2, step=2, image=image)
    assert torch.equal(loaded(tmp_path / "step-0000001", saved)["weight"], saved["weight"])


def item_offsets(folder: Path) -> list[int]:
    metadata = SafeFileSystemReader(folder).read_metadata()
    return [info.offset for info in metadata.storage_data.values()]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_synchronous_save_of_many_small_tensors_is_built_in_memory_given_back_after(
    tmp_path: Path,
) -> None:
    # DCP's own writer runs torch.save per tensor; a state of small tensors is built in
    # memory instead (its items start at multiples of 64 bytes, DCP's writer's do not), and
    # that memory is not held once the save is over.
    target = target_alone(tmp_path)
    storage = DirectStorage(target, pin=False, asynchronous=False)
    writer = BackgroundWriter(target, storage)
    small = {f"bias{i}": torch.randn(64) for i in range(50)} | {"step": torch.tensor(7.0)}
    writer.write_now(job_of(small, step=1))
    built = tmp_path / "step-0000001"
    assert all(offset % ITEM_ALIGNMENT == 0 for offset in item_offsets(built))
    assert all(torch.equal(value, small[name]) for name, value in loaded(built, small).items())
    assert storage._image_once.memory_bytes == 0
    # Large tensors go through DCP's writer, which needs no memory for all of them.
    large = {"weight": torch.randn(1024, 1024), "bias": torch.randn(3)}
    assert state_bytes(large) > 2 * SYNC_IMAGE_MAX_MEAN_TENSOR_BYTES
    writer.write_now(job_of(large, step=2))
    streamed = tmp_path / "step-0000002"
    assert any(offset % ITEM_ALIGNMENT for offset in item_offsets(streamed))
    assert all(torch.equal(value, large[name]) for name, value in loaded(streamed, large).items())
