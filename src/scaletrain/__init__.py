"""scaletrain: from one GPU to many GPUs and nodes on Slurm clusters.

In a training script::

    import scaletrain as st

    env = st.init()                                    # any launcher; device; process group
    model = st.wrap(Net())                             # on env.device, DDP when distributed
    train_loader = st.loader(train_set, global_batch_size=256)
    ckpt = st.Checkpointer(model=model, optimizer=optimizer)  # resumes this run if it can
    for epoch in ckpt.epochs(10):
        for x, y in ckpt.batches(train_loader):        # saves when due, stops when asked
            ...
    st.print0(f"loss {st.mean(loss):.3f}")

`import scaletrain` itself does not import torch: the login-node commands (plan, submit,
status, doctor) must start fast where no torch is installed. The training API below is
loaded on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "init": "scaletrain.runtime",
    "shutdown": "scaletrain.runtime",
    "current_env": "scaletrain.runtime",
    "DistEnv": "scaletrain.runtime",
    "Checkpointer": "scaletrain.checkpoint.checkpointer",
    "TrainingStopped": "scaletrain.checkpoint.stop",
    **{
        name: "scaletrain.train"
        for name in (
            "Progress",
            "barrier",
            "eval_loader",
            "loader",
            "mean",
            "mean_over_ranks",
            "print0",
            "rank_zero_first",
            "seed_everything",
            "sum_over_ranks",
            "sync_batchnorm",
            "total",
            "unwrap",
            "wrap",
        )
    },
}

if TYPE_CHECKING:
    from scaletrain.checkpoint.checkpointer import Checkpointer
    from scaletrain.checkpoint.stop import TrainingStopped
    from scaletrain.runtime import DistEnv, current_env, init, shutdown
    from scaletrain.train import (
        Progress,
        barrier,
        eval_loader,
        loader,
        mean,
        mean_over_ranks,
        print0,
        rank_zero_first,
        seed_everything,
        sum_over_ranks,
        sync_batchnorm,
        total,
        unwrap,
        wrap,
    )

__all__ = [
    "Checkpointer",
    "DistEnv",
    "Progress",
    "TrainingStopped",
    "barrier",
    "current_env",
    "eval_loader",
    "init",
    "loader",
    "mean",
    "mean_over_ranks",
    "print0",
    "rank_zero_first",
    "seed_everything",
    "shutdown",
    "sum_over_ranks",
    "sync_batchnorm",
    "total",
    "unwrap",
    "wrap",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scaletrain' has no attribute {name!r}")
