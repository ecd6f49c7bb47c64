"""`st.profile(...)`: torch.profiler on chosen ranks over a wait/warmup/active schedule.

    prof = st.profile(ranks=[0, 1], wait=5, warmup=2, active=3)
    for batch in loader:
        ...
        optimizer.step()          # each optimizer step advances the schedule

Traces go to runs/<name>/traces/rank-<R>.pt.trace.json: open them in Perfetto
(ui.perfetto.dev), in TensorBoard's PyTorch profiler plugin (`tensorboard --logdir
runs/<name>/traces`), or analyse them with `scaletrain analyze <name>`. The schedule advances
on every optimizer step (torch's global optimizer hook), so scripts written for Lightning or
accelerate need no other change; pass `step_on_optimizer=False` and call `.step()` yourself
where there is no optimizer step. `scaletrain run/submit --profile` does the same without any
line in the script.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.profile.spec import ProfileSpec, profile_from
from scaletrain.runtime.launchers import detect_layout

TRACE_SUFFIX = ".pt.trace.json"

_active: Profiler | None = None


def trace_folder(environ: dict[str, str]) -> Path:
    """traces/ of the run folder, or ./traces outside scaletrain's launchers."""
    folder = RunFolder.from_environ(environ)
    return folder.traces if folder is not None else Path("traces")


class Profiler:
    """A running torch.profiler on this rank (or a no-op on ranks not chosen)."""

    def __init__(
        self,
        spec: ProfileSpec,
        *,
        step_on_optimizer: bool = True,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        environ = dict(os.environ)
        self.rank = detect_layout(environ).rank
        self.spec = spec
        self.folder = trace_folder(environ)
        self.traces: list[Path] = []
        self._hook: Any = None
        self._profiler: torch.profiler.profile | None = None
        if not spec.includes(self.rank):
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():  # CUDA, and ROCm through the same API
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=spec.wait, warmup=spec.warmup, active=spec.active, repeat=1
            ),
            on_trace_ready=self._save,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
        )
        self._profiler.start()
        atexit.register(self.stop)  # a script that ends early still leaves its trace
        if step_on_optimizer:
            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)

    @property
    def recording(self) -> bool:
        return self._profiler is not None

    def _on_optimizer_step(self, *_: Any) -> None:
        self.step()

    def step(self) -> None:
        """One training step has ended; the schedule advances (no-op on other ranks)."""
        if self._profiler is None:
            return
        self._profiler.step()
        if self._profiler.step_num >= self.spec.total_steps:
            self.stop()

    def _save(self, profiler: torch.profiler.profile) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"rank-{self.rank}{TRACE_SUFFIX}"
        profiler.export_chrome_trace(str(path))
        self.traces.append(path)
        print(f"scaletrain: rank {self.rank} profile written to {path}", file=sys.stderr)

    def stop(self) -> None:
        """End profiling now (a schedule cut short writes what it has recorded)."""
        global _active
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.stop()
        if _active is self:
            _active = None

    def __enter__(self) -> Profiler:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def profile(
    ranks: list[int] | tuple[int, ...] | None = None,
    *,
    wait: int = 5,
    warmup: int = 2,
    active: int = 3,
    step_on_optimizer: bool = True,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
) -> Profiler:
    """Profile `ranks` (default: all) for `active` steps after `wait` + `warmup` steps.

    `scaletrain run/submit --profile` (SCALETRAIN_PROFILE) overrides ranks and schedule, so
    a job can change them without editing the script. Calling it again while a profile runs
    returns the running one.
    """
    global _active
    if _active is not None:
        return _active
    spec = profile_from(os.environ) or ProfileSpec(
        ranks=None if ranks is None else tuple(ranks), wait=wait, warmup=warmup, active=active
    )
    _active = Profiler(
        spec,
        step_on_optimizer=step_on_optimizer,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    )
    return _active
