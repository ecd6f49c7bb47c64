"""Run a training script with scaletrain's instruments, unchanged:

    python -m scaletrain.observe.profile.instrument train.py --its --arguments

Started by `scaletrain run/submit --profile` and `scaletrain scale` in place of the script.
From the environment: SCALETRAIN_PROFILE (profile chosen ranks, `st.profile`),
SCALETRAIN_STOP_AFTER_STEPS (time each step and end after that many). The script runs as
`python train.py` would run it: as __main__, with its folder first on sys.path and its own
arguments in sys.argv.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import STOP_AFTER_STEPS
from scaletrain.observe.profile.profiler import profile
from scaletrain.observe.profile.spec import profile_from
from scaletrain.observe.profile.step_clock import StepClock
from scaletrain.runtime.launchers import detect_layout


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m scaletrain.observe.profile.instrument SCRIPT [ARGS...]")
    script = Path(argv[0])
    environ = dict(os.environ)
    layout = detect_layout(environ)
    folder = RunFolder.from_environ(environ) or RunFolder(Path())
    stop_after = environ.get(STOP_AFTER_STEPS, "")
    if stop_after:
        StepClock(folder.metrics, layout.rank, layout.world_size, int(stop_after))
    if profile_from(environ) is not None:
        profile()
    sys.argv = [str(script), *argv[1:]]
    sys.path[0] = str(script.resolve().parent)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
