"""Count the gradient collectives of one training step under each strategy, with and without
accumulation: a step of 4 micro-batches must synchronise gradients once, like a step of 1.

The collectives are counted from a torch.profiler trace of the step (the backend's own
events, e.g. gloo's all_reduce and reduce_scatter): nothing is replaced.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tiny_lm import GLOBAL_BATCH, TinyLM, rank_share, sequences
from torch.profiler import ProfilerActivity, profile

import scaletrain as st

GRADIENT_COLLECTIVES = ("all_reduce", "reduce_scatter")


def collectives_in_one_step(strategy: str, accumulation_steps: int, env: st.DistEnv) -> int:
    st.seed_everything(0)
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    training = st.wrap(model, optimizer, strategy=strategy, accumulation_steps=accumulation_steps)
    batch = rank_share(sequences(GLOBAL_BATCH, seed=1), env.rank, env.world_size)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for (micro,) in training.micro_batches(batch):
            training.backward(training.model(micro[:, :-1], micro[:, 1:]))
    # Only the backward passes are profiled: that is where gradients are synchronised.
    names = [event.name for event in profiler.events()]
    training.step()
    return sum(any(kind in name for kind in GRADIENT_COLLECTIVES) for name in names)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("strategies", nargs="+")
    args = parser.parse_args()
    env = st.init()
    counts = {
        strategy: {steps: collectives_in_one_step(strategy, steps, env) for steps in (1, 4)}
        for strategy in args.strategies
    }
    if env.is_main:
        args.out.write_text(json.dumps(counts))
    st.shutdown()


if __name__ == "__main__":
    main()
