"""One Slurm task reports what it was given: its arguments and the variables a job script set
for it. No torch: it starts in a blink. Writes $PROBE_DIR/task-<SLURM_PROCID>.json; with
$PROBE_WAIT_FOR set, task 0 first waits (at most 60 s) until that file exists."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

# Variables whose value in each task the tests compare with what the job script intended.
REPORTED = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_RESTART_COUNT",
    "ROCR_VISIBLE_DEVICES",
    "MIOPEN_USER_DB_PATH",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "SCALETRAIN_RUN_DIR",
)
WAIT_LIMIT_S = 60

folder = Path(os.environ["PROBE_DIR"])
task = int(os.environ["SLURM_PROCID"])
release = os.environ.get("PROBE_WAIT_FOR")
if release and task == 0:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
report = {
    "argv": sys.argv[1:],
    "script": sys.argv[0],
    "cwd": str(Path.cwd()),
    "host": socket.gethostname(),
    "environ": {name: os.environ.get(name) for name in REPORTED},
    "miopen_folder_exists": Path(os.environ.get("MIOPEN_USER_DB_PATH", "/nonexistent")).is_dir(),
}
(folder / f"task-{task}.json").write_text(json.dumps(report))
