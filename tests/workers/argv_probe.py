"""Write what this process was started with (argv, working folder, environment) as JSON.

A stand-in training script for job scripts run through tests/support/fake_slurm.py: it
imports nothing heavy, so a launch mode's own launcher (torchrun, accelerate) is what costs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

record = {"argv": sys.argv, "cwd": str(Path.cwd()), "environ": dict(os.environ)}
out = Path(os.environ["PROBE_OUT"]) / f"{os.getpid()}.json"
out.write_text(json.dumps(record))
