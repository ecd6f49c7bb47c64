"""Asynchronous saves from 2 ranks of replicated tensors, which DCP's plan splits between the
ranks; the early copy of each save predicts that split from the last save.

Saves 1 to 5 of four tensors the "optimizer step" changes, with a tensor staged at the step
boundary placed before them from save 3 on (it moves the split: save 3's plan no longer is
the one predicted). At saves 2 and 5, rank 0 lets the step go, then waits up to 30 s for
rank 1 to start its save: its plan needs rank 1 too, so a step let go meanwhile was let go
before the plan. Writes <out>/steps.pt (rank 0): the state of each save, copied when it was
taken, and when each step was let go.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import scaletrain as st
from scaletrain.checkpoint.direct.storage import DirectStorage
from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.checkpoint.manifest import Position
from scaletrain.checkpoint.state import capture_rank_state
from scaletrain.checkpoint.writer import BackgroundWriter, SaveJob, SaveTarget

PEER_WAIT_S = 30.0

parser = argparse.ArgumentParser()
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()
env = st.init()
target = SaveTarget(
    store=CheckpointStore(args.out / "checkpoints"),
    rank=env.rank,
    world_size=env.world_size,
    group=None,
    keep=10,
    device=torch.device("cpu"),
    cores=1,
)
writer = BackgroundWriter(target, DirectStorage(target, pin=False, asynchronous=True))
torch.manual_seed(0)  # the same tensors on both ranks, as DDP keeps them
stepped = {f"weight{i}": torch.randn(256, 256) for i in range(4)}
later = frozenset(tensor.data_ptr() for tensor in stepped.values())
states: dict[int, dict[str, torch.Tensor]] = {}
let_go: dict[int, str] = {}


def peer_started(step: int) -> Path:
    return args.out / f"rank1-started-{step}"


for step in range(1, 6):
    staged = {"buffer": torch.full((64, 64), float(step))} if step >= 3 else {}
    state = staged | stepped
    states[step] = {name: value.clone() for name, value in state.items()}
    waits_for_peer = step in (2, 5)
    if env.rank == 1 and waits_for_peer:
        deadline = time.monotonic() + PEER_WAIT_S
        while not (args.out / f"rank0-let-go-{step}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        peer_started(step).touch()
    position = Position(step=step)
    capture = capture_rank_state(torch.device("cpu"), None)
    writer.submit(
        SaveJob(position=position, reason="test", state={"model": state}, rank_state=capture),
        later=later,
    )
    writer.before_step()  # what the optimizer step's pre-hook does
    if env.rank == 0 and waits_for_peer:
        let_go[step] = "before rank 1 started" if not peer_started(step).exists() else "after"
        (args.out / f"rank0-let-go-{step}").touch()
    for value in stepped.values():
        value.add_(1.0)  # the optimizer step
writer.wait()
if env.rank == 0:
    torch.save({"states": states, "let_go": let_go}, args.out / "steps.pt")
st.shutdown()
