"""The load's reader: one read of each file, straight into the tensors, one parse of each
layout, and still every damaged byte is found, nothing unsafe is unpickled, and resharded reads
get the right values."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save

from scaletrain.checkpoint.direct import reader as reader_module
from scaletrain.checkpoint.direct.reader import VerifyingReader
from scaletrain.checkpoint.manifest import Manifest, digest
from scaletrain.checkpoint.safe_load import METADATA_NAME, SafeFileSystemReader, SafeLoadPlanner
from scaletrain.checkpoint.writer import RANK_STATE_KEY
from tests.checkpoint.direct.conftest import save_alone

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

SHARD = "__0_0.distcp"


def saved_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "weight": torch.randn(256, 512, generator=generator),
        "half": torch.randn(64, 128, generator=generator).to(torch.bfloat16),
        "steps": torch.arange(10),
        "scalar": torch.tensor(3.5),
    }


def blank(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Zeros of the saved shapes and the rank-state placeholder: only a load fills them."""
    return {
        "model": {name: torch.zeros_like(value) for name, value in state.items()},
        RANK_STATE_KEY: {"0": ""},
    }


def read(folder: Path, into: dict[str, Any]) -> list[str]:
    """Load `folder` into `into` through the reader, checking every shard; its problems."""
    files = Manifest.read(folder).files
    reader = VerifyingReader(
        folder, files, verify=[name for name in files if name != METADATA_NAME]
    )
    load(into, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    return reader.problems


def where(folder: Path, key: str) -> tuple[int, int]:
    """(offset, length) of a saved entry inside its file."""
    metadata = SafeFileSystemReader(folder).read_metadata()
    [info] = [info for index, info in metadata.storage_data.items() if index.fqn == key]
    return info.offset, info.length


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_an_intact_checkpoint_loads_exactly(tmp_path: Path) -> None:
    state = saved_state()
    folder = save_alone(tmp_path, state, cores=1)
    into = blank(state)
    weight = into["model"]["weight"]
    assert read(folder, into) == []
    assert all(torch.equal(into["model"][name], state[name]) for name in state)
    assert into["model"]["weight"] is weight  # loaded in place: no new tensor
    assert '"python"' in into[RANK_STATE_KEY]["0"]


@pytest.mark.parametrize("place", ["tensor data", "tensor header", "random states"])
def test_one_flipped_byte_anywhere_is_found(tmp_path: Path, place: str) -> None:
    state = saved_state()
    folder = save_alone(tmp_path, state, cores=1)
    weight_at, weight_length = where(folder, "model.weight")
    rank_state_at, _ = where(folder, f"{RANK_STATE_KEY}.0")
    file, offset = {
        "tensor data": (SHARD, weight_at + weight_length // 2),
        "tensor header": (SHARD, weight_at + 40),  # torch.save's zip header and pickle
        "random states": (SHARD, rank_state_at + 40),
    }[place]
    flip(folder / file, offset)
    into = blank(state)
    assert read(folder, into) == [f"{file} does not match its checksum"]
    # Nothing but tensor bytes reached the state: the random states wait for the check.
    assert into[RANK_STATE_KEY]["0"] == ""


def test_a_file_no_entry_is_read_from_is_still_checked(tmp_path: Path) -> None:
    state = saved_state()
    folder = save_alone(tmp_path, state, cores=1)
    spare = folder / "spare.bin"
    spare.write_bytes(b"x" * 1000)
    intact = digest(spare)
    flip(spare, 500)
    files = {**Manifest.read(folder).files, "spare.bin": intact}
    reader = VerifyingReader(folder, files, verify=[SHARD, "spare.bin"])
    load(blank(state), storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    assert reader.problems == ["spare.bin does not match its checksum"]


def test_a_garbled_header_in_another_ranks_share_is_damage_not_an_error(tmp_path: Path) -> None:
    # After a change of world size a rank reads from files that another rank checks; when
    # their bytes cannot even be parsed, the manifest says whether that is damage.
    state = saved_state()
    folder = save_alone(tmp_path, state, cores=1)
    weight_at, _ = where(folder, "model.weight")
    flip(folder / SHARD, weight_at)  # the zip signature of its torch.save
    reader = VerifyingReader(folder, Manifest.read(folder).files, verify=[])
    load(blank(state), storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    assert reader.problems == [f"{SHARD} does not match its checksum"]


def test_other_layouts_and_types_go_through_a_buffer(tmp_path: Path) -> None:
    state = saved_state()
    folder = save_alone(tmp_path, state, cores=1)
    transposed = torch.zeros(512, 256).t()  # not contiguous: cannot be read into directly
    into = blank(state)
    into["model"]["weight"] = transposed
    assert read(folder, into) == []
    assert torch.equal(transposed, state["weight"])


def test_a_stored_transposed_tensor_loads_with_its_strides(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    weight = torch.arange(12.0).reshape(3, 4).t()  # saved with its strides by torch.save
    save({"weight": weight}, checkpoint_id=folder, no_dist=True)
    into = {"weight": torch.zeros(4, 3)}
    reader = VerifyingReader(folder, {}, verify=[])
    load(into, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    assert reader.problems == [] and torch.equal(into["weight"], weight)


def test_saved_objects_other_than_plain_data_are_still_refused(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    save(
        {"weights": torch.arange(6.0), "extra": Fraction(1, 3)}, checkpoint_id=folder, no_dist=True
    )
    into = {"weights": torch.zeros(6), "extra": Fraction(0)}
    with pytest.raises(CheckpointException, match=r"Weights only load failed"):
        load(
            into,
            storage_reader=VerifyingReader(folder, {}, verify=[]),
            planner=SafeLoadPlanner(),
            no_dist=True,
        )
    assert into["extra"] == Fraction(0)


def layouts_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {
        **{f"layer{i}": torch.randn(32, 64, generator=generator) for i in range(4)},
        "wide": torch.randn(64, 32, generator=generator),  # as many bytes, another shape
        "half": torch.randn(32, 64, generator=generator).to(torch.bfloat16),
    }


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stored items torch.load parses from now on (the real parse runs)."""
    parsed: list[str] = []
    parse = reader_module._stored_tensor

    def counted(file: Any, info: Any) -> Any:
        parsed.append(f"{info.relative_path}@{info.offset}")
        return parse(file, info)

    monkeypatch.setattr(reader_module, "_stored_tensor", counted)
    return parsed


def test_tensors_of_one_layout_are_parsed_once_and_each_gets_its_own_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = layouts_state()
    folder = save_alone(tmp_path, state, cores=1)
    parsed = counting_parses(monkeypatch)
    into = blank(state)
    assert read(folder, into) == []
    assert all(torch.equal(into["model"][name], state[name]) for name in state)
    assert len(parsed) == 3  # float 32x64, float 64x32, bf16 32x64


def test_plain_dcp_items_are_each_parsed_and_load_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "checkpoint"
    state = layouts_state()
    save(state, checkpoint_id=folder, no_dist=True)
    parsed = counting_parses(monkeypatch)
    into = {name: torch.zeros_like(value) for name, value in state.items()}
    reader = VerifyingReader(folder, {}, verify=[])
    load(into, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    assert reader.problems == []
    assert all(torch.equal(into[name], state[name]) for name in state)
    assert len(parsed) == len(state)  # each torch.save has its own serialization id


def test_a_flipped_header_byte_of_a_layout_parsed_before_is_found(tmp_path: Path) -> None:
    state = layouts_state()
    folder = save_alone(tmp_path, state, cores=1)
    at, _ = where(folder, "model.layer3")
    flip(folder / SHARD, at + 40)
    into = blank(state)
    assert read(folder, into) == [f"{SHARD} does not match its checksum"]
