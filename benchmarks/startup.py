"""Benchmark 2: time from the command to the first finished training step.

    python benchmarks/startup.py

The same script is started with `scaletrain run --nproc 2` and with plain
`torchrun --standalone --nproc-per-node=2`, alternately, several times. Rank 0 writes the
wall-clock time of its first finished step; start-up = that time - the moment the command
was started. Both include Python, torch and the process group start-up.
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
        commands = {
            "scaletrain run": [str(BIN / "scaletrain"), "run", "--nproc", "2", str(script)],
            "torchrun": [
                str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", str(script)
            ],
        }  # fmt: skip
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for repeat in range(REPEATS):
            order = list(commands) if repeat % 2 == 0 else list(reversed(commands))
            for name in order:
                seconds[name].append(first_step_after(commands[name], folder))
                print(f"{name}: {seconds[name][-1]:.2f} s", file=sys.stderr)
    ratio = spread(seconds["scaletrain run"])["median"] / spread(seconds["torchrun"])["median"]
    record = {
        "benchmark": "startup",
        "nproc": 2,
        "seconds_to_first_step": {name: spread(values) for name, values in seconds.items()},
        "raw_seconds": seconds,
        "ratio_scaletrain_to_torchrun": ratio,
    }
    print(f"saved {save('startup', record)}", file=sys.stderr)


if __name__ == "__main__":
    main()
