"""The training side of the graceful-stop handshake (see HELPER_BRIEF / checkpoint docs), as
small as it can be, to test the job script's side: run until $SCALETRAIN_RUN_DIR/stop-requested
appears (at most 60 s), then write stopped.json and exit 0, as rank 0 does after its stop
checkpoint. A rerun (SLURM_RESTART_COUNT set) removes both files, as a resume does, and ends.
Each run appends one line to <run dir>/runs.txt: restart count and what happened."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

WAIT_LIMIT_S = 60

run_dir = Path(os.environ["SCALETRAIN_RUN_DIR"])
restarts = os.environ.get("SLURM_RESTART_COUNT", "")
stop_request, stopped = run_dir / "stop-requested", run_dir / "stopped.json"
with (run_dir / "runs.txt").open("a") as runs:
    if restarts:
        stop_request.unlink(missing_ok=True)
        stopped.unlink(missing_ok=True)
        runs.write(f"restart {restarts}: resumed and finished\n")
    else:
        (run_dir / "training-started").touch()
        deadline = time.monotonic() + WAIT_LIMIT_S
        while not stop_request.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped.write_text(json.dumps({"step": 7, "reason": "stop requested"}))
        runs.write(f"first run: stopped after a stop request: {stop_request.exists()}\n")
        print("stopped at step 7", flush=True)
