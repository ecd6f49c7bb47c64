"""Waits longer than the process group's timeout: rank 0 prepares for `--first-seconds`
inside rank_zero_first while the others wait; then every rank passes a barrier at which
rank 1 arrives `--late-seconds` late. The group's timeout is `--group-timeout` seconds.
With `--wait-timeout` the others give up waiting on rank 0 after that many seconds."""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path

import scaletrain as st

parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--group-timeout", type=float, required=True)
parser.add_argument("--first-seconds", type=float, default=0.0)
parser.add_argument("--late-seconds", type=float, default=0.0)
parser.add_argument("--wait-timeout", type=float, default=None)
args = parser.parse_args()

env = st.init(timeout=timedelta(seconds=args.group_timeout))
ready = args.out / "prepared"
options = {} if args.wait_timeout is None else {"timeout": timedelta(seconds=args.wait_timeout)}
with st.rank_zero_first(**options):
    if env.rank == 0:
        time.sleep(args.first_seconds)  # a download
        ready.write_text("ready")
    found_ready = ready.exists()
if env.rank == 1:
    time.sleep(args.late_seconds)  # a slow final evaluation on one rank
st.barrier()
reduced = st.total(1.0)  # the group still works after the long waits
(args.out / f"rank{env.rank}.json").write_text(
    json.dumps({"found_ready": found_ready, "total": reduced})
)
st.shutdown()
