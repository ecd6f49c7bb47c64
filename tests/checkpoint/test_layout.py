"""On-disk layout: atomic publish, LATEST, retention, damage detection (no torch processes)."""

from __future__ import annotations

from pathlib import Path

from scaletrain.checkpoint.layout import CheckpointStore, files_of_rank
from scaletrain.checkpoint.manifest import (
    Manifest,
    Position,
    digest,
    size_problems,
    verify_files,
)


def write_checkpoint(store: CheckpointStore, step: int, *, publish: bool = True) -> Path:
    """A checkpoint as the writer leaves it: data files, then the manifest, then the rename."""
    folder = store.partial(step)
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(bytes(range(256)) * 3)
    manifest = Manifest(
        position=Position(step=step),
        world_size=1,
        reason="test",
        saved_at="2026-01-01T00:00:00+00:00",
        files={"__0_0.distcp": digest(folder / "__0_0.distcp")},
    )
    manifest.write(folder)
    return store.publish(step) if publish else folder


def test_publish_makes_the_checkpoint_complete_and_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    first = write_checkpoint(store, 10)
    second = write_checkpoint(store, 20)
    assert first.name == "step-0000010" and second.name == "step-0000020"
    assert store.complete() == [second, first]
    assert store.latest() == second
    assert (store.root / "LATEST").read_text() == "step-0000020\n"


def test_a_half_written_checkpoint_is_never_complete_nor_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    good = write_checkpoint(store, 10)
    # A crash while writing step 20: its files exist, it was never renamed.
    write_checkpoint(store, 20, publish=False)
    # A crash after the rename of step 30 but before its manifest existed cannot happen
    # (the manifest is written first); a step folder without one is not complete either.
    (store.root / "step-0000030").mkdir()
    assert store.complete() == [good]
    assert store.latest() == good
    store.remove_unfinished()
    assert not store.partial(20).exists()
    assert good.is_dir()


def test_retention_keeps_the_newest_k(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    for step in (10, 20, 30, 40, 50):
        write_checkpoint(store, step)
    deleted = store.prune(keep=2)
    assert [folder.name for folder in deleted] == ["step-0000030", "step-0000020", "step-0000010"]
    assert [folder.name for folder in store.complete()] == ["step-0000050", "step-0000040"]
    assert sorted(path.name for path in store.root.iterdir()) == [
        "LATEST",
        "step-0000040",
        "step-0000050",
    ]


def test_steps_sort_numerically_beyond_seven_digits(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    write_checkpoint(store, 9_999_999)
    big = write_checkpoint(store, 10_000_000)
    assert store.complete()[0] == big


def test_truncated_and_garbled_files_are_found(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    folder = write_checkpoint(store, 3)
    expected = Manifest.read(folder).files
    data = folder / "__0_0.distcp"
    original = data.read_bytes()
    assert verify_files(folder, expected) == []
    data.write_bytes(original[:100])
    assert verify_files(folder, expected) == ["__0_0.distcp has 100 bytes instead of 768"]
    assert size_problems(folder, expected) == ["__0_0.distcp has 100 bytes instead of 768"]
    data.write_bytes(original[:5] + b"X" + original[6:])  # same size, one byte changed
    assert verify_files(folder, expected) == ["__0_0.distcp does not match its checksum"]
    assert size_problems(folder, expected) == []  # the size alone does not show it
    data.unlink()
    assert verify_files(folder, expected) == ["__0_0.distcp is missing"]


def test_damaged_checkpoints_are_set_aside_not_deleted(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    folder = write_checkpoint(store, 10)
    moved = store.set_aside(folder)
    assert moved.name == "step-0000010.damaged" and (moved / "__0_0.distcp").is_file()
    again = store.set_aside(write_checkpoint(store, 10))
    assert again.name == "step-0000010.damaged-2"
    assert store.complete() == []
    store.remove_unfinished()
    assert moved.is_dir() and again.is_dir()
    assert store.damaged() == [moved, again]
    assert CheckpointStore(tmp_path / "no-such-folder").damaged() == []


def test_latest_names_no_checkpoint_when_its_pointer_is_wrong(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    good = write_checkpoint(store, 10)
    pointer = store.root / "LATEST"
    # A pointer to a checkpoint that was deleted, or to one never published.
    pointer.write_text("step-0000040\n")
    assert store.latest() is None
    write_checkpoint(store, 20, publish=False)
    pointer.write_text(store.partial(20).name + "\n")
    assert store.latest() is None
    # Bytes that are no text at all (a torn write on a broken disk): no latest, no exception.
    pointer.write_bytes(b"step-\xff\xfe\x00\n")
    assert store.latest() is None
    assert store.complete() == [good]


def test_each_rank_checks_the_files_it_wrote_for_any_world_size() -> None:
    names = {".metadata", "__0_0.distcp", "__1_0.distcp", "__3_0.distcp", "__3_1.distcp"}
    assert files_of_rank(names, 0, 4) == [".metadata", "__0_0.distcp"]
    assert files_of_rank(names, 3, 4) == ["__3_0.distcp", "__3_1.distcp"]
    # Saved by 4 ranks, checked by 2: nothing is left out, nothing is checked twice.
    shares = [files_of_rank(names, rank, 2) for rank in range(2)]
    assert sorted(shares[0] + shares[1]) == sorted(names)
