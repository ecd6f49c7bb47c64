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
status, doctor) must start fast where no torch is installed. The training API (the names in
scaletrain/api.py) is loaded on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from scaletrain.api import *  # noqa: F403


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # __path__, __file__ ... are looked up before the API
        raise AttributeError(f"module 'scaletrain' has no attribute {name!r}")
    api = import_module("scaletrain.api")
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'scaletrain' has no attribute {name!r}") from None
