"""Start an asynchronous save of a few hundred MB, then call st.shutdown() at once; write
what was on disk right after shutdown returned to <out>/rank<N>.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn

import scaletrain as st

parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()
env = st.init()
model = st.wrap(nn.Sequential(*(nn.Linear(1024, 1024) for _ in range(24))))  # ~100 MB
ckpt = st.Checkpointer(model=model, every_steps=1, asynchronous=True, run_dir=args.out / "run")
for batch in ckpt.batches([torch.randn(4, 1024)]):
    model(batch).sum().backward()
# The step boundary after the only batch handed a save to the background writer.
st.shutdown()
checkpoints = args.out / "run" / "checkpoints"
latest = checkpoints / "LATEST"
(args.out / f"rank{env.rank}.json").write_text(
    json.dumps(
        {
            "latest": latest.read_text().strip() if latest.exists() else None,
            "partial": sorted(path.name for path in checkpoints.glob("*.partial")),
        }
    )
)
