"""What saves and loads switch off in the whole process while they run (Python's automatic
garbage collection, torch.save's record checksums) is off then and as it was afterwards; a
world of one process runs no collectives of DCP."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from scaletrain.checkpoint.process_switches import without_automatic_gc
from tests.checkpoint.conftest import save_alone
from tests.conftest import WORKERS, torchrun


class _Witness:
    """A value in the saved state that notes, when DCP pickles it, whether the automatic
    garbage collector was on."""

    seen: ClassVar[list[bool]] = []

    def __getstate__(self) -> dict[str, Any]:
        _Witness.seen.append(gc.isenabled())
        return {}


@pytest.fixture
def collector_as_it_was() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_as_it_was")
@pytest.mark.parametrize("enabled_before", [True, False])
def test_a_save_runs_without_automatic_gc_and_leaves_it_as_it_was(
    tmp_path: Path, enabled_before: bool
) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    _Witness.seen.clear()
    state = {"weight": torch.randn(64, 64), "step": torch.tensor(3.0), "note": _Witness()}
    save_alone(tmp_path, state, cores=2)  # type: ignore[arg-type]
    assert _Witness.seen == [False]
    assert gc.isenabled() is enabled_before
    assert torch.serialization.get_crc32_options() is True


@pytest.mark.usefixtures("collector_as_it_was")
def test_overlapping_saves_turn_it_back_on_only_when_the_last_one_ends() -> None:
    gc.enable()
    with without_automatic_gc():
        with without_automatic_gc():  # an asynchronous save and a synchronous one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_world_of_one_saves_and_resumes_without_dcps_collectives_or_its_notice(
    tmp_path: Path,
) -> None:
    result = torchrun(WORKERS / "single_process_checkpoint.py", str(tmp_path), nproc=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DCP collectives: 0; resumed at step 3" in result.stdout
    assert "assuming the intent is to" not in result.stderr
    assert result.stderr.count("UserWarning: the user's own notice") == 1
