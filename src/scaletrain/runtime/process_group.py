"""Start and stop torch.distributed for this process, from whatever launcher started it."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from scaletrain.core.cpus import allowed_cpus
from scaletrain.core.errors import LaunchEnvironmentError, ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.torch_support import untested
from scaletrain.runtime.binding import bind_to_gpu_cores
from scaletrain.runtime.child_processes import (
    end_children_with_this_process,
    refuse_a_child_importing_the_script,
)
from scaletrain.runtime.device import (
    DeviceChoice,
    backend_for,
    choose_device,
    describe_visibility,
    parse_device,
)
from scaletrain.runtime.heartbeat import start_heartbeat, stop_heartbeat, watchdog_enabled
from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.layout import DistEnv, ProcessLayout, cpus_per_process
from scaletrain.runtime.long_waits import LongWaits
from scaletrain.runtime.network import agent_hosts_store, wait_until_listening
from scaletrain.runtime.stack_dump import flight_recorder_variables

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.distributed.distributed_c10d import Store

logger = logging.getLogger("scaletrain")

_current: DistEnv | None = None
_long_waits: LongWaits | None = None
# Work that must end before the process group does (a checkpoint being written in the
# background): shutdown() calls these first.
_before_shutdown: list[Callable[[], None]] = []

# gloo's worker threads may still be releasing the last collective's work object right after
# it completed; that release takes the GIL, and once the interpreter is finalizing, taking
# the GIL aborts the process ("terminate called without an active exception", seen in ~10%
# of 2-rank DDP runs here; pytorch/pytorch#179291). A short GIL-free pause lets them finish.
_WORKER_DRAIN_S = 0.05
# A gloo worker thread keeps the last work it ran until it takes the next one; on torch 2.7
# destroying the group then joins a worker that waits for the GIL the destroying thread holds
# (the work of an all_gather_object holds Python tensors): a hang at exit, seen after a
# failed asynchronous save. A barrier per worker thread (gloo's default: 2) hands each one
# work that holds no Python object before the group is destroyed.
_GLOO_WORKER_THREADS = 2


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


def _choose(layout: ProcessLayout, device: str | None, environ: Mapping[str, str]) -> DeviceChoice:
    """The device asked for, or chosen by the rules of runtime/device.py ('cuda': a GPU so
    chosen, and an error when there is none)."""
    import torch

    asked = parse_device(device) if device is not None else None
    if asked is not None and (asked.type == "cpu" or asked.index is not None):
        return asked
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choice = choose_device(layout, visible, environ)
    if asked is not None and choice.type != "cuda":
        raise LaunchEnvironmentError(
            f"device='cuda' was asked for, but torch sees no GPU ({describe_visibility(environ)}).",
            "run on a GPU node with a GPU build of PyTorch, or leave out device= to use the "
            "CPU when there is no GPU.",
        )
    return choice


def _join(
    backend: str,
    layout: ProcessLayout,
    timeout: timedelta | None,
    device: torch.device,
) -> Store:
    """Join the default process group; return the rendezvous store (for long waits).

    The store comes from torch's own env:// rendezvous, called here rather than inside
    init_process_group so that scaletrain can wait on it (runtime/long_waits.py).
    `device_id` binds the group to this rank's GPU: NCCL sets up its communicator on that
    GPU at once, and barriers never guess a device from the rank (torch's barrier docs).
    """
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout
    from torch.distributed.rendezvous import rendezvous

    device_id = device if device.type == "cuda" else None
    if layout.world_size == 1:
        # An in-memory store: no port to pick and nothing that can collide.
        from torch._C._distributed_c10d import HashStore

        store: Store = HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device_id)
        return store
    export_torch_variables(layout, os.environ)
    if layout.rank != 0 and not agent_hosts_store(os.environ):
        # Rank 0 opens the store inside its own init (srun, mpirun; torchrun's restart-safe
        # store per attempt): connect the moment it listens, not after torch's back-off.
        # Whatever else goes wrong, torch's own connection below reports.
        wait_until_listening(
            layout.master_addr, layout.master_port, (timeout or default_pg_timeout).total_seconds()
        )
    store, _, _ = next(
        rendezvous(
            "env://",
            rank=layout.rank,
            world_size=layout.world_size,
            timeout=timeout or default_pg_timeout,
        )
    )
    dist.init_process_group(
        backend,
        store=store,
        rank=layout.rank,
        world_size=layout.world_size,
        timeout=timeout,  # None: torch's default for the backend
        device_id=device_id,
    )
    return store


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
    refuse_a_child_importing_the_script()
    import torch
    import torch.distributed as dist

    global _long_waits
    environ = os.environ if environ is None else environ
    layout = detect_layout(environ)
    note = untested(torch.__version__)
    if note and layout.rank == 0:
        print(f"scaletrain: warning: {note}", file=sys.stderr, flush=True)
    end_children_with_this_process()
    # Before torch starts its threads: they inherit the cores of the thread that makes them.
    bind_to_gpu_cores(layout, environ)
    choice = _choose(layout, device, environ)
    torch_device = torch.device(str(choice))
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    backend = backend or backend_for(choice)
    run_folder = RunFolder.from_environ(environ)
    watched = watchdog_enabled(run_folder, environ)

    if dist.is_initialized():
        # Joined before scaletrain was asked (Lightning, accelerate, the user): torch keeps
        # that group's store, and has no public accessor for it.
        store = dist.distributed_c10d._get_default_store()
    else:
        if watched:
            _set_defaults(flight_recorder_variables(), "for the hang watchdog's stack dumps")
        store = _join(backend, layout, timeout, torch_device)
        atexit.register(_release_process_group)
    _long_waits = LongWaits(store, layout.world_size)
    _current = DistEnv(
        **{field.name: getattr(layout, field.name) for field in fields(layout)},
        device=torch_device,
        backend=backend,
        cpu_count=cpus_per_process(layout, environ, allowed_cpus()),
        run_folder=run_folder,
    )
    if _current.is_main:
        print(f"scaletrain: {_current.describe()}", file=sys.stderr, flush=True)
    if watched:
        start_heartbeat(_current, environ)
        atexit.register(stop_heartbeat)
    return _current


def _set_defaults(values: Mapping[str, str], why: str) -> None:
    """Set variables torch reads (unless set already), and log each one."""
    for name, value in values.items():
        if name not in os.environ:
            os.environ[name] = value
            logger.info("set %s=%s (%s)", name, value, why)


def current_env() -> DistEnv:
    """The DistEnv that init() returned in this process."""
    if _current is None:
        raise ScaletrainError(
            "scaletrain.init() has not been called in this process.",
            "call `env = scaletrain.init()` at the start of your training script.",
        )
    return _current


def long_waits() -> LongWaits:
    """Barriers with a timeout of their own, on the rendezvous store (see long_waits.py)."""
    current_env()
    assert _long_waits is not None  # set together with _current
    return _long_waits


def before_shutdown(work: Callable[[], None]) -> None:
    """Have shutdown() call `work` (e.g. wait for a background save) before leaving the group."""
    _before_shutdown.append(work)


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


def _release_process_group(every_rank_here: bool = False) -> None:
    """Destroy the group while the interpreter is still alive (also at exit, via atexit,
    where other ranks may be gone: no collective then unless the process is alone)."""
    import torch.distributed as dist

    if dist.is_initialized():
        alone = dist.get_world_size() == 1
        if dist.get_backend() == "gloo" and (every_rank_here or alone):
            for _ in range(_GLOO_WORKER_THREADS):
                dist.barrier()
        dist.destroy_process_group()
        time.sleep(_WORKER_DRAIN_S)


def shutdown() -> None:
    """Leave the process group cleanly: finish background work (a checkpoint still being
    written), wait until every rank is done, then release the group."""
    global _current, _long_waits
    while _before_shutdown:
        _before_shutdown.pop(0)()
    every_rank_here = False
    if _long_waits is not None and _current is not None and _current.world_size > 1:
        _long_waits.barrier()
        every_rank_here = True
    stop_heartbeat()
    _release_process_group(every_rank_here)
    _current = _long_waits = None
