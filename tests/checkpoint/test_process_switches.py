"""Python's automatic garbage collection is off while a save runs and as it was afterwards,
on each storage; a world of one process runs no collectives of DCP."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from scaletrain.checkpoint.process_switches import without_automatic_gc
from scaletrain.checkpoint.torch_compat import HAS_ASYNC_NO_DIST
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
    tmp_path: Path, enabled_before: bool, storage: str
) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    _Witness.seen.clear()
    state = {"weight": torch.randn(64, 64), "step": torch.tensor(3.0), "note": _Witness()}
    save_alone(tmp_path, state, storage=storage)  # type: ignore[arg-type]
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


@pytest.mark.multiprocess
def test_a_world_of_one_saves_and_resumes_without_dcps_collectives_or_its_notice(
    tmp_path: Path, storage: str
) -> None:
    worker = WORKERS / "single_process_checkpoint.py"
    result = torchrun(worker, str(tmp_path), storage, nproc=1)
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(
        r"DCP collectives: (\d+) in the background, (\d+) else; resumed at step 3", result.stdout
    )
    assert found, result.stdout
    in_background, others = int(found[1]), int(found[2])
    assert others == 0
    # torch before 2.9 has no async_save without collectives: a world of one runs them.
    assert in_background == 0 or not HAS_ASYNC_NO_DIST
    assert "assuming the intent is to" not in result.stderr
    assert result.stderr.count("UserWarning: the user's own notice") == 1
