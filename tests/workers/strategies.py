"""Train a tiny transformer for a few steps under each strategy given; write the loss curves.

Every run sees the same global batches: rank r of W takes rows r·B/W … (r+1)·B/W of each, so
a run with W ranks must follow the same curve as one process (DDP's promise; FSDP, HSDP and
ZeRO make the same one). `--seed-per-rank` builds different initial weights on each rank:
every strategy must start from rank 0's, as DDP does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tiny_lm import GLOBAL_BATCH, TinyLM, rank_share, sequences

import scaletrain as st


def train(options: dict, steps: int, seed_per_rank: bool, env: st.DistEnv) -> list[float]:
    st.seed_everything(0, per_rank=seed_per_rank)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    training = st.wrap(model, optimizer, **options)
    losses = []
    for step in range(steps):
        global_batch = sequences(GLOBAL_BATCH, seed=100 + step)
        batch = rank_share(global_batch, env.rank, env.world_size).to(env.device)
        total = 0.0
        for (micro,) in training.micro_batches(batch):
            loss = training.model(micro[:, :-1], micro[:, 1:])
            training.backward(loss)
            total += loss.item() / training.accumulation_steps
        training.step()
        losses.append(st.mean(total))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed-per-rank", action="store_true")
    parser.add_argument("runs", nargs="+", help="label=JSON options of st.wrap")
    args = parser.parse_args()
    env = st.init()
    results = {}
    for run in args.runs:
        label, _, options = run.partition("=")
        results[label] = train(json.loads(options), args.steps, args.seed_per_rank, env)
    if env.is_main:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"losses-{env.world_size}.json").write_text(json.dumps(results))
    st.shutdown()


if __name__ == "__main__":
    main()
