"""One backward pass of TinyLM on each rank's share of a batch under DDP and under a sharded
strategy, from the same weights; rank 0 writes how far each sharded gradient (whole, gathered
from its shards) is from DDP's, or the error the strategy was refused with."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tiny_lm import GLOBAL_BATCH, TinyLM, rank_share, sequences

import scaletrain as st
from scaletrain.core.errors import ScaletrainError


def gradients(options: dict[str, object], env: st.DistEnv) -> dict[str, torch.Tensor]:
    st.seed_everything(0)
    model = TinyLM()
    training = st.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), **options)
    batch = rank_share(sequences(GLOBAL_BATCH, seed=1), env.rank, env.world_size)
    training.backward(training.model(batch[:, :-1], batch[:, 1:]))
    found = {}
    for name, parameter in training.model.named_parameters():
        grad = parameter.grad
        whole = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        found[name.removeprefix("module.")] = whole.detach().clone()
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("strategy", type=json.loads, help="st.wrap's options, as JSON")
    arguments = parser.parse_args()
    env = st.init()
    reference = gradients({"strategy": "ddp"}, env)
    try:
        sharded = gradients(arguments.strategy, env)
    except ScaletrainError as error:
        result: dict[str, object] = {"refused": str(error)}
    else:
        result = {
            "largest_relative_difference": max(
                ((sharded[name] - grad).abs().max() / grad.abs().max()).item()
                for name, grad in reference.items()
            ),
            "parameters": sorted(sharded) == sorted(reference),
        }
    if env.rank == 0:
        arguments.out.write_text(json.dumps(result))
    st.shutdown()


if __name__ == "__main__":
    main()
