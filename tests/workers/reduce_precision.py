"""Gradients after one backward pass, reduced over ranks in the dtype `reduce_precision` asks
for: reduced in bf16, every gradient value is a bf16 number (8 bits of mantissa); reduced in
float32, most are not. Writes, per strategy and reduce precision, the share of gradient values
that bf16 represents exactly."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tiny_lm import GLOBAL_BATCH, TinyLM, rank_share, sequences

import scaletrain as st


def share_of_bf16_values(strategy: str, reduce_precision: str, env: st.DistEnv) -> float:
    st.seed_everything(0)
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    training = st.wrap(model, optimizer, strategy=strategy, reduce_precision=reduce_precision)
    batch = rank_share(sequences(GLOBAL_BATCH, seed=1), env.rank, env.world_size)
    training.backward(training.model(batch[:, :-1], batch[:, 1:]))
    exact = total = 0
    for parameter in training.model.parameters():
        grad = parameter.grad
        if grad is None:
            continue
        local = grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP: this rank's shard
        exact += int((local == local.to(torch.bfloat16).float()).sum())
        total += local.numel()
    training.step()
    return exact / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("strategies", nargs="+")
    args = parser.parse_args()
    env = st.init()
    shares = {
        strategy: {
            reduce: share_of_bf16_values(strategy, reduce, env) for reduce in ("fp32", "bf16")
        }
        for strategy in args.strategies
    }
    if env.is_main:
        args.out.write_text(json.dumps(shares))
    st.shutdown()


if __name__ == "__main__":
    main()
