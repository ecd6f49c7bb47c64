"""Print one line per rank to stdout and stderr; optionally fail on one rank."""

from __future__ import annotations

import argparse
import os
import sys

import scaletrain as st

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--nproc", default="", help="an argument named like one of scaletrain's")
args = parser.parse_args()
env = st.init()
print(f"hello from rank {env.rank} of {env.world_size} args={args.nproc}", flush=True)
print(f"stderr of rank {env.rank}", file=sys.stderr, flush=True)
print(f"run dir {os.environ.get('SCALETRAIN_RUN_DIR')}", flush=True)
if env.rank == args.fail_rank:
    raise RuntimeError(f"rank {env.rank} failed on purpose")
st.shutdown()
