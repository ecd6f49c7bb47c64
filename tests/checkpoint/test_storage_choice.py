"""`Checkpointer(storage=...)` as a user meets it: a name that is no storage is refused with
the names there are, and the opt-in direct storage on a torch it was never tested on gives
way to DCP's public API with one notice line, not a crash inside torch's internals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scaletrain.checkpoint.dcp_storage import DcpStorage
from scaletrain.checkpoint.storage import direct_unusable_because, open_storage
from scaletrain.core.errors import ScaletrainError
from tests.checkpoint.conftest import target_alone


def test_a_name_that_is_no_storage_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    with pytest.raises(ScaletrainError) as refused:
        open_storage("fast", target_alone(tmp_path), pin=False, asynchronous=False)
    assert str(refused.value) == (
        "Checkpointer(storage='fast') names no storage.\n"
        "HINT: use storage='dcp' (the default: DCP's public API) or 'direct' (opt-in)."
    )


def test_the_direct_storage_on_an_untested_torch_saves_through_dcp_with_one_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scaletrain.checkpoint.direct import torch_private

    # The versions direct/ was tested on, as a torch release would leave them: not this one.
    monkeypatch.setattr(torch_private, "TESTED_TORCH_VERSIONS", ("2.0.0", "2.1.0"))
    chosen = open_storage("direct", target_alone(tmp_path), pin=False, asynchronous=True)
    assert isinstance(chosen, DcpStorage)
    running = torch.__version__.split("+")[0]
    assert capsys.readouterr().err == (
        f"scaletrain: storage='direct' was tested on torch 2.0.0, 2.1.0, not on {running}; "
        "checkpoints go through DCP's public API instead (storage='dcp')\n"
    )


def test_a_local_build_of_a_tested_release_counts_as_that_release() -> None:
    from scaletrain.checkpoint.direct import torch_private

    tested = torch_private.TESTED_TORCH_VERSIONS[0]
    assert direct_unusable_because(f"{tested}+cpu") is None
    assert direct_unusable_because(tested) is None
    assert direct_unusable_because("2.0.0+cpu") == (
        f"was tested on torch {', '.join(torch_private.TESTED_TORCH_VERSIONS)}, not on 2.0.0"
    )


def test_the_direct_storage_is_used_where_it_was_tested(tmp_path: Path) -> None:
    if direct_unusable_because(torch.__version__) is not None:
        pytest.skip(f"storage='direct' is not used on torch {torch.__version__}")
    from scaletrain.checkpoint.direct.storage import DirectStorage

    chosen = open_storage("direct", target_alone(tmp_path), pin=False, asynchronous=True)
    assert isinstance(chosen, DirectStorage)
