"""Launch modes as data: names, shapes and descriptions in planning/modes.toml."""

from __future__ import annotations

from importlib.resources import files

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.toml_text import parse_toml
from scaletrain.planning.modes import DEFAULT_MODE, launch_mode, launch_modes


def test_modes_and_their_shapes() -> None:
    shapes = {name: mode.tasks_for(8) for name, mode in launch_modes().items()}
    assert shapes == {"torchrun": 1, "srun": 8, "accelerate": 1, "deepspeed": 8, "lightning": 8}
    assert DEFAULT_MODE in shapes
    assert all(mode.description for mode in launch_modes().values())


def test_unknown_mode_lists_the_known_ones() -> None:
    with pytest.raises(ScaletrainError) as caught:
        launch_mode("horovod")
    assert caught.value.hint.startswith(
        "use one of: torchrun, srun, accelerate, deepspeed, lightning"
    )


def test_modes_hold_modes_toml_as_written_with_lists_as_tuples() -> None:
    # Read afresh (launch_modes() keeps what it read first): every field as the file has it,
    # lists as tuples, so that a mode is a frozen value.
    file = parse_toml((files("scaletrain.planning") / "modes.toml").read_text(encoding="utf-8"))
    fresh = launch_modes.__wrapped__()  # type: ignore[attr-defined]
    assert list(fresh) == list(file)
    for name, fields in file.items():
        mode = fresh[name]
        assert mode.description == fields["description"]
        assert mode.tasks_per_node == fields["tasks_per_node"]
        assert mode.script_variables == tuple(fields.get("script_variables", ()))
        assert isinstance(mode.script_variables, tuple)
