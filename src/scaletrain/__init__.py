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

from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from scaletrain.api import *  # noqa: F403


@cache
def _api() -> dict[str, tuple[str, str]]:
    """public name -> (module, name there), read from api.py's import lines: the API is
    listed once, and each name loads only its own module (st.init does not import the
    checkpoint code; a script's start-up pays only for what it uses)."""
    import ast

    tree = ast.parse((Path(__file__).parent / "api.py").read_text(encoding="utf-8"))
    return {
        alias.asname or alias.name: (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def __getattr__(name: str) -> Any:
    if name not in _api():
        raise AttributeError(f"module 'scaletrain' has no attribute {name!r}")
    module, defined_as = _api()[name]
    return getattr(import_module(module), defined_as)
