"""Two ranks (torchrun, gloo, DDP) save at every step with st.Checkpointer on the direct
storage: asynchronously, or with a second argument `synchronous`, synchronously a state of
tensors of MiBs (which DCP's own writer writes, not a file image).

Steps 1-3 keep the state's layout; before step 4 a buffer of the model becomes bfloat16
(a new layout); asynchronously, the write of step 5 fails on rank 1 (`os.write` refuses its
file); step 6 saves again. Prints, on rank 0, how many global plans DCP made and how many object
collectives DCP itself ran by then, after each save; every rank prints whether the failed
save raised for it. Rank 0 also keeps each step's model state with torch.save
(`reference-<step>.pt` in the run folder, its first argument), to compare with what plain
DCP loads from the checkpoints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from dcp_calls import dcp_collectives, start_counting
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

import scaletrain as st
from scaletrain.checkpoint.direct.storage import many_small_tensors
from scaletrain.checkpoint.layout import checkpoint_name

start_counting()
global_plans = 0
planned = DefaultSavePlanner.create_global_plan


def counted_plan(self: DefaultSavePlanner, plans: Any) -> Any:
    global global_plans
    global_plans += 1
    return planned(self, plans)


DefaultSavePlanner.create_global_plan = counted_plan  # type: ignore[method-assign]


def counts() -> dict[str, int]:
    return {"global plans": global_plans, "DCP collectives": dcp_collectives()}


FAILING_STEP = 5
real_write = os.write


def write_unless_refused(fd: int, data: Any) -> int:
    """Rank 1's write of the checkpoint of FAILING_STEP fails as a full disk would."""
    if f"{checkpoint_name(FAILING_STEP)}.partial" in str(Path(f"/proc/self/fd/{fd}").readlink()):
        raise OSError(28, "No space left on device (injected by the test)")
    return real_write(fd, data)


synchronous = sys.argv[2:] == ["synchronous"]
# Synchronously, one layer of 4 MiB: tensors of over 1 MiB on average, for DCP's writer.
WIDTH, OUT = (1024, 1024) if synchronous else (16, 2)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        hidden = [] if synchronous else [nn.Linear(WIDTH, WIDTH)]
        self.layers = nn.Sequential(*hidden, nn.Linear(WIDTH, OUT))
        self.register_buffer("scale", torch.ones(OUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) * self.scale.float()


env = st.init()
torch.manual_seed(0)
net = Net()
model = st.wrap(net)
optimizer = torch.optim.Adam(model.parameters())
run_dir = Path(sys.argv[1])
run_dir.mkdir(parents=True, exist_ok=True)
if env.rank == 1 and not synchronous:
    os.write = write_unless_refused
checkpointer = st.Checkpointer(
    model=model,
    optimizer=optimizer,
    every_steps=1,
    keep=10,
    asynchronous=not synchronous,
    storage="direct",
    run_dir=run_dir,
)
batches = [torch.randn(4, WIDTH) for _ in range(6)]
for step, batch in enumerate(checkpointer.batches(batches), start=1):
    if step == 4:
        net.register_buffer("scale", net.scale.to(torch.bfloat16))
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    if env.is_main:
        torch.save(dict(net.state_dict()), run_dir / f"reference-{step}.pt")
    # The save of the step before this one started when this batch was asked for.
    try:
        checkpointer._writer.wait()
    except CheckpointException as error:  # a BaseException, as DCP raises it
        print(f"rank {env.rank}: the save of step {step - 1} failed: {error!r}", flush=True)
    if env.is_main:
        print(f"saved step {step - 1}: {counts()}", flush=True)
checkpointer.save(reason="last")
if env.is_main:
    print(f"at the end: {counts()}", flush=True)
    # After training: the state dict of an optimizer without state would initialize it.
    state = checkpointer._objects.state_dict()
    print(f"written as a file image when synchronous: {many_small_tensors(state)}", flush=True)
st.shutdown()
