"""One process that reports progress for a few steps, like a short training run."""

from __future__ import annotations

import argparse
import time

import scaletrain as st

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--step-seconds", type=float, default=0.5)
args = parser.parse_args()
env = st.init()
progress = st.Progress(args.steps, samples_per_step=8, every=1)
for step in range(args.steps):
    time.sleep(args.step_seconds)
    progress.update(epoch=0, loss=1.0 / (step + 1))
progress.finish()
st.shutdown()
