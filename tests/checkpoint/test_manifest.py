"""checkpoint.json as a user's tools read it: what is written comes back, damage is named
with the field at fault, and file checks say which file and how it differs."""

from __future__ import annotations

import json
import tracemalloc
import zlib
from pathlib import Path

import pytest

from scaletrain.checkpoint import manifest as manifest_module
from scaletrain.checkpoint.manifest import (
    DamagedCheckpointError,
    FileDigest,
    Manifest,
    Position,
    digest,
    newer_torch_error,
    size_problems,
    verify_files,
)


def a_manifest(**changes: object) -> Manifest:
    fields: dict[str, object] = {
        "position": Position(step=120, epoch=3, batches_in_epoch=7),
        "world_size": 4,
        "reason": "stop: SIGTERM — requeued",
        "saved_at": "2026-12-07T02:00:00+00:00",
        "files": {
            "__0_0.distcp": FileDigest(size=10, crc32=1234),
            ".metadata": FileDigest(size=3, crc32=5),
        },
        "versions": {"torch": "2.14.1", "scaletrain": "0.1.0"},
    }
    return Manifest(**{**fields, **changes})  # type: ignore[arg-type]


def test_what_is_written_is_read_back_and_is_plain_json(tmp_path: Path) -> None:
    written = a_manifest()
    written.write(tmp_path)
    assert Manifest.read(tmp_path) == written
    text = (tmp_path / "checkpoint.json").read_bytes().decode("utf-8")
    record = json.loads(text)
    assert record["format"] == 1 and record["position"] == {
        "step": 120,
        "epoch": 3,
        "batches_in_epoch": 7,
    }
    assert record["files"]["__0_0.distcp"] == {"size": 10, "crc32": 1234}
    assert record["reason"] == "stop: SIGTERM — requeued"
    assert text.isascii()  # non-ASCII escaped: the same bytes in any node's locale
    assert text.endswith("}\n") and text.startswith('{\n "format": 1,\n')  # one key a line


def test_a_manifest_without_files_or_versions_reads_as_empty(tmp_path: Path) -> None:
    record = {"position": {"step": 1}, "world_size": 1, "reason": "end", "saved_at": "t"}
    (tmp_path / "checkpoint.json").write_text(json.dumps(record))
    read = Manifest.read(tmp_path)
    assert read.position == Position(step=1) and read.files == {} and read.versions == {}


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (None, "[Errno 2] No such file or directory"),
        ("{not json", "Expecting property name"),
        ("[1, 2]", "not a JSON object"),
        (
            json.dumps({"world_size": 2, "reason": "end", "saved_at": "t"}),
            "position: Field required",
        ),
        (
            json.dumps(
                {"position": {"step": "ten"}, "world_size": 2, "reason": "end", "saved_at": "t"}
            ),
            "position.step: Input should be a valid integer",
        ),
        (
            json.dumps({"position": {}, "world_size": 0, "reason": "end", "saved_at": "t"}),
            "world_size below 1 or a negative position",
        ),
        (
            json.dumps(
                {"position": {"epoch": -1}, "world_size": 2, "reason": "end", "saved_at": "t"}
            ),
            "world_size below 1 or a negative position",
        ),
        (
            json.dumps(
                {
                    "position": {"batches_in_epoch": -3},
                    "world_size": 2,
                    "reason": "end",
                    "saved_at": "t",
                    "files": {"a": {"size": 1}},
                }
            ),
            "files.a.crc32: Field required",
        ),
    ],
)
def test_a_damaged_manifest_is_named_with_what_is_wrong(
    tmp_path: Path, content: str | None, named: str
) -> None:
    if content is not None:
        (tmp_path / "checkpoint.json").write_text(content)
    with pytest.raises(DamagedCheckpointError) as raised:
        Manifest.read(tmp_path)
    assert raised.value.problem.startswith(
        f"The checkpoint {tmp_path} has an unreadable checkpoint.json ("
    )
    problem = raised.value.problem.split("checkpoint.json (", 1)[1]
    assert problem.startswith(named)
    assert raised.value.hint == (
        "scaletrain resumes from the previous complete checkpoint; move this one away."
    )


def test_every_problem_of_a_validated_manifest_is_listed(tmp_path: Path) -> None:
    record = {"position": {"step": "x"}, "world_size": "y", "reason": "end", "saved_at": "t"}
    (tmp_path / "checkpoint.json").write_text(json.dumps(record))
    with pytest.raises(DamagedCheckpointError) as raised:
        Manifest.read(tmp_path)
    assert (
        "(position.step: Input should be a valid integer, unable to parse string as an integer; "
        in str(raised.value)
    )
    assert "; world_size: Input should be a valid integer" in str(raised.value)


def test_a_digest_reads_a_large_file_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_bytes(bytes(32 * 2**20))
    monkeypatch.setattr(manifest_module, "_CHUNK_BYTES", 2**20)
    tracemalloc.start()
    try:
        digest(tmp_path / "file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # a piece or two at a time, not the file's 32 MB


def test_a_digest_is_the_size_and_the_crc_of_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytes(range(256)) * 41
    (tmp_path / "file").write_bytes(data)
    whole = digest(tmp_path / "file")
    assert whole == FileDigest(size=len(data), crc32=zlib.crc32(data))
    monkeypatch.setattr(manifest_module, "_CHUNK_BYTES", 1000)  # read in 11 pieces
    assert digest(tmp_path / "file") == whole


def test_file_checks_name_each_missing_resized_or_garbled_file(tmp_path: Path) -> None:
    (tmp_path / "same").write_bytes(b"abc")
    (tmp_path / "short").write_bytes(b"x" * 999)
    expected = {
        "same": digest(tmp_path / "same"),
        "short": FileDigest(size=1_000_000, crc32=0),
        "gone": FileDigest(size=1, crc32=0),
    }
    assert size_problems(tmp_path, expected) == [
        "short has 999 bytes instead of 1,000,000",
        "gone is missing",
    ]
    assert verify_files(tmp_path, expected) == size_problems(tmp_path, expected)
    (tmp_path / "garbled").write_bytes(b"abd")
    intact = {"same": expected["same"], "garbled": expected["same"]}
    assert size_problems(tmp_path, intact) == []
    assert verify_files(tmp_path, intact) == ["garbled does not match its checksum"]
    assert verify_files(tmp_path, {"same": expected["same"]}) == []


def test_a_checkpoint_of_a_newer_torch_is_refused_by_name(tmp_path: Path) -> None:
    a_manifest(versions={"torch": "2.15.0+cpu"}).write(tmp_path)
    error = newer_torch_error(tmp_path, "2.14.1", ValueError("too many values to unpack"))
    assert error is not None
    assert str(error) == (
        f"The checkpoint {tmp_path} was written by torch 2.15.0+cpu, and this torch 2.14.1 "
        "cannot read it (too many values to unpack). It is left as it is.\n"
        "HINT: resume or export it with torch 2.15 or newer: the image or module that wrote it "
        "(a newer torch reads older checkpoints)."
    )


def test_the_refusal_quotes_only_the_start_of_a_long_error(tmp_path: Path) -> None:
    a_manifest(versions={"torch": "2.15.0"}).write(tmp_path)
    error = newer_torch_error(tmp_path, "2.14.1", ValueError("x" * 300 + "TAIL"))
    assert error is not None
    assert f"cannot read it ({'x' * 300}). It is left" in error.problem


@pytest.mark.parametrize("written_by", ["2.14.1", "2.14.0", "2.7.1", ""])
def test_a_checkpoint_of_the_same_or_an_older_torch_is_not_refused(
    tmp_path: Path, written_by: str
) -> None:
    a_manifest(versions={"torch": written_by} if written_by else {}).write(tmp_path)
    assert newer_torch_error(tmp_path, "2.14.1", ValueError("x")) is None


def test_no_torch_error_is_made_up_from_a_damaged_manifest(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_text("{")
    assert newer_torch_error(tmp_path, "2.14.1", ValueError("x")) is None
