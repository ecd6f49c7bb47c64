"""Launch modes as data: names, shapes and descriptions in planning/modes.toml."""

from __future__ import annotations

import pytest

from scaletrain.core.errors import ScaletrainError
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
