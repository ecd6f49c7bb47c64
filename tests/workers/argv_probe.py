"""Write what this process was started with (argv, working folder, environment) as JSON.

A stand-in training script for job scripts run through tests/support/fake_slurm.py: it
imports nothing heavy, so a launch mode's own launcher (torchrun, accelerate) is what costs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

parent_argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")
record = {
    "argv": sys.argv,
    "cwd": str(Path.cwd()),
    "environ": dict(os.environ),
    "parent_argv": parent_argv,
}
out = Path(os.environ["PROBE_OUT"]) / f"{os.getpid()}.json"
out.write_text(json.dumps(record))
print(f"probe written: {out.name}")
