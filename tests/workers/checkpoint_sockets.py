"""Count the sockets this process opens for each Checkpointer set-up, into <out>/rank<N>.json.

gloo + synchronous saves, and gloo + asynchronous ones, are real Checkpointers; the NCCL
cases build the same bookkeeping groups as a Checkpointer of an NCCL job would (the groups
are gloo either way; only the training group would be NCCL)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from torch import nn

import scaletrain as st
from scaletrain.checkpoint.checkpointer import _bookkeeping_groups


def open_sockets() -> int:
    count = 0
    for descriptor in list(Path("/proc/self/fd").iterdir()):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed by now
            count += str(descriptor.readlink()).startswith("socket:")
    return count


parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()
env = st.init()
model = st.wrap(nn.Linear(4, 4))
added = {}
for name, asynchronous in (("gloo, synchronous", False), ("gloo, asynchronous", True)):
    before = open_sockets()
    st.Checkpointer(
        model=model, every_minutes=None, asynchronous=asynchronous, run_dir=args.out / name
    )
    added[name] = open_sockets() - before
for name, asynchronous in (("nccl, synchronous", False), ("nccl, asynchronous", True)):
    before = open_sockets()
    _bookkeeping_groups(dataclasses.replace(env, backend="nccl"), asynchronous)
    added[name] = open_sockets() - before
(args.out / f"rank{env.rank}.json").write_text(json.dumps(added))
st.shutdown()
