"""The repeated blocks of a model: the units FSDP shards and activation checkpointing recomputes.

Transformer blocks live in a ModuleList in nearly every model (nanoGPT `transformer.h`,
Hugging Face `model.layers`), so those lists' children are the default; users can name
other modules or a block class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from scaletrain.core.errors import ScaletrainError
from scaletrain.train.strategies.options import BlockSpec


def _outermost(modules: list[nn.Module]) -> list[nn.Module]:
    """Drop modules that sit inside another module of the list (no nested units)."""
    inner = {id(child) for module in modules for child in module.modules() if child is not module}
    return [module for module in modules if id(module) not in inner]


def _named(model: nn.Module, name: str) -> list[nn.Module]:
    try:
        module = model.get_submodule(name)
    except AttributeError:
        top = ", ".join(name for name, _ in model.named_children())
        raise ScaletrainError(
            f"The model has no module named {name!r}.",
            f"name a module by its dotted path as in model.named_modules() (top level: {top}).",
        ) from None
    # A ModuleList cannot run by itself, so naming one means its children.
    return list(module.children()) if isinstance(module, nn.ModuleList) else [module]


def find_blocks(model: nn.Module, spec: BlockSpec | Sequence[BlockSpec] | None) -> list[nn.Module]:
    """The modules named by `spec` (see WrapOptions.blocks), in model order, outermost only."""
    if spec is None:
        lists: list[nn.Module] = [
            module for module in model.modules() if isinstance(module, nn.ModuleList)
        ]
        return _outermost([block for found in _outermost(lists) for block in found.children()])
    specs = [spec] if isinstance(spec, str | type) else list(spec)
    found: list[nn.Module] = []
    for item in specs:
        if isinstance(item, str):
            found += _named(model, item)
        else:
            matches = [module for module in model.modules() if isinstance(module, item)]
            if not matches:
                raise ScaletrainError(
                    f"The model has no module of class {item.__name__}.",
                    "name the class of your repeated blocks, or a module by its dotted path.",
                )
            found += matches
    order = {id(module): index for index, module in enumerate(model.modules())}
    return sorted(_outermost(found), key=lambda module: order[id(module)])


def checkpoint_activations(blocks: list[nn.Module]) -> None:
    """Recompute each block's forward pass during backward instead of storing activations.

    Uses torch.utils.checkpoint (non-reentrant, random state preserved, so dropout masks are
    the same in the recomputation); parameter names do not change.
    """
    for block in blocks:
        block.forward = _recomputing(block.forward)


def _recomputing(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def recomputed_forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return recomputed_forward
