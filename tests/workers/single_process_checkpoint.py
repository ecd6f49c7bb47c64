"""A world of one process (torchrun, gloo) saves with st.Checkpointer, asynchronously and
synchronously, and resumes; prints how many object collectives DCP itself ran, and the
resumed step. A warning of its own, given before and after the load, shows once. Its run
folder is the first argument."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from dcp_calls import dcp_collectives, start_counting
from torch import nn

import scaletrain as st

start_counting()


def users_own_notice() -> None:
    warnings.warn("the user's own notice", UserWarning, stacklevel=1)  # shown once by default


st.init()
model = st.wrap(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)))
optimizer = torch.optim.Adam(model.parameters())
run_dir = Path(sys.argv[1])
checkpointer = st.Checkpointer(
    model=model, optimizer=optimizer, every_steps=2, asynchronous=True, run_dir=run_dir
)
for batch in checkpointer.batches([torch.randn(4, 8) for _ in range(3)]):
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
checkpointer.save(reason="synchronous")  # steps 2 (in the background) and 3 saved
users_own_notice()
resumed = st.Checkpointer(model=model, optimizer=optimizer, run_dir=run_dir)
users_own_notice()  # the load has not made Python forget it
print(f"DCP collectives: {dcp_collectives()}; resumed at step {resumed.step}", flush=True)
st.shutdown()
