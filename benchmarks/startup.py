"""Benchmark 2: time from the command to the first finished training step.

    python benchmarks/startup.py

The same script is started with plain `torchrun --standalone --nproc-per-node=2` and with
`scaletrain run --nproc 2`, in turn, several times. Rank 0 writes the wall-clock time of its
first finished step; start-up = that time - the moment the command was started. Both include
Python, torch and the process group start-up.

Like for like, the target compares `scaletrain run --max-restarts 0` with plain torchrun,
which restarts nothing. `scaletrain run`'s default (3 elastic restarts) is measured too: for
restarts to work on torch >= 2.4 each attempt needs a store of its own, hosted by rank 0,
which the other ranks reach a little later (restart_environment in planning/modes.toml).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import save, spread

REPEATS = 7
BIN = Path(sys.executable).parent
SCRIPT = """
import os, time, torch
import scaletrain as st
env = st.init()
model = st.wrap(torch.nn.Linear(16, 4))
loss = model(torch.randn(8, 16)).sum()
loss.backward()
if env.is_main:
    with open(os.environ["FIRST_STEP_FILE"], "w") as file:
        file.write(repr(time.time()))
st.shutdown()
"""


def first_step_after(command: list[str], folder: Path) -> float:
    marker = folder / "first-step"
    marker.unlink(missing_ok=True)
    environ = {**os.environ, "FIRST_STEP_FILE": str(marker)}
    started = time.time()
    subprocess.run(command, cwd=folder, env=environ, capture_output=True, check=True, timeout=300)
    return float(marker.read_text()) - started


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        script = folder / "train.py"
        script.write_text(SCRIPT)
        scaletrain_run = [str(BIN / "scaletrain"), "run", "--nproc", "2"]
        commands = {
            "torchrun": [
                str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", str(script)
            ],
            "scaletrain run --max-restarts 0": [
                *scaletrain_run, "--max-restarts", "0", str(script)
            ],
            "scaletrain run": [*scaletrain_run, str(script)],
        }  # fmt: skip
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for repeat in range(REPEATS):
            order = (
                list(commands)[repeat % len(commands) :] + list(commands)[: repeat % len(commands)]
            )
            for name in order:
                seconds[name].append(first_step_after(commands[name], folder))
                print(f"{name}: {seconds[name][-1]:.2f} s", file=sys.stderr)
    medians = {name: spread(values)["median"] for name, values in seconds.items()}
    record = {
        "benchmark": "startup",
        "nproc": 2,
        "seconds_to_first_step": {name: spread(values) for name, values in seconds.items()},
        "raw_seconds": seconds,
        "ratio_scaletrain_to_torchrun": (
            medians["scaletrain run --max-restarts 0"] / medians["torchrun"]
        ),
        "ratio_default_with_restarts_to_torchrun": medians["scaletrain run"] / medians["torchrun"],
    }
    print(f"saved {save('startup', record)}", file=sys.stderr)


if __name__ == "__main__":
    main()
