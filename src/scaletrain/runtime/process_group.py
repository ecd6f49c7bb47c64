"""Start and stop torch.distributed for this process, from whatever launcher started it."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.runtime.child_processes import end_children_with_this_process
from scaletrain.runtime.device import DeviceChoice, backend_for, choose_device
from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.layout import DistEnv, ProcessLayout, allowed_cpus, cpus_per_process

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

logger = logging.getLogger("scaletrain")

_current: DistEnv | None = None

# gloo's worker threads may still be releasing the last collective's work object right after
# it completed; that release takes the GIL, and once the interpreter is finalizing, taking
# the GIL aborts the process ("terminate called without an active exception", seen in ~10%
# of 2-rank DDP runs here; pytorch/pytorch#179291). A short GIL-free pause lets them finish.
_WORKER_DRAIN_S = 0.05


def torch_variables(layout: ProcessLayout) -> dict[str, str]:
    """torch's env:// variables for a layout; libraries such as HF Trainer also read them."""
    return {
        "RANK": str(layout.rank),
        "LOCAL_RANK": str(layout.local_rank),
        "WORLD_SIZE": str(layout.world_size),
        "LOCAL_WORLD_SIZE": str(layout.local_world_size),
        "GROUP_RANK": str(layout.node_rank),
        "MASTER_ADDR": layout.master_addr,
        "MASTER_PORT": str(layout.master_port),
    }


def export_torch_variables(layout: ProcessLayout, environ: MutableMapping[str, str]) -> None:
    """Set the env:// variables that the launcher did not set, and log each one."""
    for name, value in torch_variables(layout).items():
        if name not in environ:
            environ[name] = value
            logger.info("set %s=%s (from the %s launcher)", name, value, layout.launcher)


def _parse_device(device: str) -> DeviceChoice:
    kind, _, index = device.partition(":")
    return DeviceChoice(kind, int(index) if index else None)


def init(
    *,
    device: str | None = None,
    backend: str | None = None,
    timeout: timedelta | None = None,
    environ: Mapping[str, str] | None = None,
) -> DistEnv:
    """Detect the launcher, pick this process's device and join the process group.

    Works the same for torchrun, srun (one task per GPU), mpirun and a plain `python train.py`
    (a group of one, so that collectives and DDP-free code paths still work). Calling it again
    returns the same DistEnv.
    """
    global _current
    if _current is not None:
        return _current
    import torch
    import torch.distributed as dist

    environ = os.environ if environ is None else environ
    layout = detect_layout(environ)
    end_children_with_this_process()
    if device is None:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        choice = choose_device(layout, visible, environ)
    else:
        choice = _parse_device(device)
    torch_device = torch.device(str(choice))
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    backend = backend or backend_for(choice)

    if not dist.is_initialized():
        if layout.world_size == 1:
            # An in-memory store: no port to pick and nothing that can collide.
            from torch._C._distributed_c10d import HashStore

            dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1)
        else:
            export_torch_variables(layout, os.environ)
            dist.init_process_group(
                backend,
                init_method="env://",
                rank=layout.rank,
                world_size=layout.world_size,
                timeout=timeout,  # None: torch's default for the backend
            )
        atexit.register(_release_process_group)
    _current = DistEnv(
        **{field.name: getattr(layout, field.name) for field in fields(layout)},
        device=torch_device,
        backend=backend,
        cpu_count=cpus_per_process(layout, environ, allowed_cpus()),
        run_folder=RunFolder.from_environ(environ),
    )
    if _current.is_main:
        print(f"scaletrain: {_current.describe()}", file=sys.stderr, flush=True)
    return _current


def current_env() -> DistEnv:
    """The DistEnv that init() returned in this process."""
    if _current is None:
        raise ScaletrainError(
            "scaletrain.init() has not been called in this process.",
            "call `env = scaletrain.init()` at the start of your training script.",
        )
    return _current


def new_group(
    ranks: Sequence[int] | None = None, *, backend: str | None = None
) -> ProcessGroup | None:
    """A process group of `ranks` (all by default): collective, every rank must call it; None
    on ranks outside the group."""
    import torch.distributed as dist

    group = dist.new_group(list(ranks) if ranks is not None else None, backend=backend)
    return group if isinstance(group, dist.ProcessGroup) else None


def all_gather_objects(value: Any) -> list[Any]:
    """Every rank's `value` (picklable), in rank order, on every rank."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def _release_process_group() -> None:
    """Destroy the group while the interpreter is still alive (also at exit, via atexit)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
        time.sleep(_WORKER_DRAIN_S)


def shutdown() -> None:
    """Leave the process group cleanly: wait until every rank is done, then release it."""
    global _current
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
    _release_process_group()
    _current = None
