"""A world of one process (torchrun, gloo) saves with st.Checkpointer, asynchronously and
synchronously, and resumes; prints how many object collectives DCP itself ran for the
asynchronous save and for the rest, and the resumed step. A warning of its own, given before
and after the load, shows once. Its run folder is the first argument, the storage the
second."""

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
run_dir, storage = Path(sys.argv[1]), sys.argv[2]
checkpointer = st.Checkpointer(
    model=model,
    optimizer=optimizer,
    every_steps=2,
    asynchronous=True,
    storage=storage,  # type: ignore[arg-type]
    run_dir=run_dir,
)
for batch in checkpointer.batches([torch.randn(4, 8) for _ in range(3)]):
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
checkpointer._writer.wait()  # step 2, saved in the background
in_background = dcp_collectives()
checkpointer.save(reason="synchronous")  # step 3
users_own_notice()
resumed = st.Checkpointer(model=model, optimizer=optimizer, storage=storage, run_dir=run_dir)  # type: ignore[arg-type]
users_own_notice()  # the load has not made Python forget it
others = dcp_collectives() - in_background
print(
    f"DCP collectives: {in_background} in the background, {others} else; "
    f"resumed at step {resumed.step}",
    flush=True,
)
st.shutdown()
