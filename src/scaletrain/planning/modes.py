"""Launch modes as data (modes.toml): names, one-line descriptions, task shape, variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any, Literal

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.toml_text import parse_toml

DEFAULT_MODE = "torchrun"


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchMode:
    name: str
    tasks_per_node: Literal["one", "per-gpu"]
    """'one': a launcher inside one task per node starts the GPU processes;
    'per-gpu': Slurm starts one task per GPU."""
    description: str
    cpu_environment: Mapping[str, str] = field(default_factory=dict)
    """Variables the job exports when its processes run on CPUs."""
    restart_environment: Mapping[str, str] = field(default_factory=dict)
    """Variables the launch needs when its launcher restarts crashed processes."""
    launcher_package: str | None = None
    """The Python package of the launcher, which the job's Python must have."""
    precision_option: str | None = None
    """The launcher's option for mixed precision, if it has one (`--precision` sets it)."""
    script_variables: tuple[str, ...] = ()
    """What a script written for this mode's own launcher reads from the environment; the
    preflight checks that each is set."""
    own_gpu_if_script_wants: bool = False
    """Each task may be shown only its own GPU, for scripts that use cuda:0."""
    local_rank_option: bool = False
    """The script gets its local rank as an option when its parser takes one."""

    def environment(self, *, on_cpus: bool, max_restarts: int) -> dict[str, str]:
        """The variables this mode adds to a launch."""
        added = dict(self.cpu_environment) if on_cpus else {}
        if max_restarts > 0:
            added |= self.restart_environment
        return added

    def tasks_for(self, gpus_per_node: int) -> int:
        """Slurm tasks per node for a node with this many GPUs in use."""
        return 1 if self.tasks_per_node == "one" else gpus_per_node


@cache
def launch_modes() -> dict[str, LaunchMode]:
    """Every launch mode, in the order of modes.toml."""
    table = parse_toml((files("scaletrain.planning") / "modes.toml").read_text(encoding="utf-8"))
    modes = {name: LaunchMode(name=name, **_with_tuples(fields)) for name, fields in table.items()}
    for mode in modes.values():
        if mode.tasks_per_node not in ("one", "per-gpu"):
            raise ValueError(f"modes.toml: {mode.name}.tasks_per_node must be 'one' or 'per-gpu'")
    return modes


def _with_tuples(fields: dict[str, Any]) -> dict[str, Any]:
    """TOML lists as tuples: modes are frozen values."""
    return {
        key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()
    }


def launch_mode(name: str) -> LaunchMode:
    """The mode called `name`; an unknown name is an error listing the known ones."""
    modes = launch_modes()
    if name not in modes:
        raise ScaletrainError(
            f"There is no launch mode called {name!r}.",
            f"use one of: {', '.join(modes)} (see `scaletrain plan --help`).",
        )
    return modes[name]
