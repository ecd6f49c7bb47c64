"""A small model trained with DeepSpeed, started as CSC starts it on several nodes: one Slurm
task per GPU running this script with --deepspeed --deepspeed_config. DeepSpeed reads torch's
variables, which the job script sets per task. Each rank writes <PROBE_DIR>/rank-<N>.json."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import deepspeed
import torch

import scaletrain as st

parser = argparse.ArgumentParser()
# As DeepSpeed's examples do: the launcher passes each process its local rank as an argument.
parser.add_argument("--local_rank", type=int, default=-1)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
deepspeed.init_distributed(dist_backend="gloo")  # CPU processes stand in for GPUs here
torch.manual_seed(0)  # the same initial weights on every rank
model = torch.nn.Linear(4, 1)
engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
rank = torch.distributed.get_rank()
# Different data on each rank: the weights stay equal only if gradients are averaged.
features = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
for _ in range(3):
    loss = torch.nn.functional.mse_loss(engine(features), features.sum(dim=1, keepdim=True))
    engine.backward(loss)
    engine.step()
report = {
    "rank": rank,
    "world_size": torch.distributed.get_world_size(),
    "local_rank": engine.local_rank,
    "local_rank_argument": args.local_rank,
    "host": socket.gethostname(),
    "weights": model.weight.detach().flatten().tolist(),
}
(Path(os.environ["PROBE_DIR"]) / f"rank-{rank}.json").write_text(json.dumps(report))
if args.local_rank == 0:  # DeepSpeed examples print from local rank 0 of each node
    print(f"node {socket.gethostname()}: trained, weights {report['weights']}")
# Leave the gloo group as a scaletrain script does: a script that just exits aborts now and
# then ("terminate called without an active exception", pytorch/pytorch#179291).
st.shutdown()
