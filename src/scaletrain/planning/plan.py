"""The decided resource set: everything a job script needs, saved as runs/<name>/plan.toml."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.toml_text import TomlError, parse_toml
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.memory import MemoryEstimate
from scaletrain.planning.modes import LaunchMode, launch_mode
from scaletrain.planning.software import JobSoftware

# The plan file's key for the launch mode, by name.
_MODE = "mode"


@dataclass(frozen=True, kw_only=True, slots=True)
class BillingEstimate:
    """What the allocation costs under the site's rule, if it runs for the whole time asked."""

    unit: str
    rule: str
    """The site's rule in words."""
    arithmetic: str
    """The rule applied to this allocation, e.g. `max(2 GPUs, ⌈14 cores/8⌉) = 2 × 0.5`."""
    units_per_hour: float
    gpu_share_units_per_hour: float
    """What the GPUs alone cost; more means cores or memory beyond the fair share, or whole
    nodes billed for fewer GPUs."""
    hours: float
    total_units: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """A request made concrete: partition, shape, Slurm options, environment, cost."""

    cluster: str
    accelerator: str
    """'nvidia', 'amd' or 'cpu' (CPU processes stand in for GPUs, gloo backend)."""
    partition: str
    partition_reason: str
    launch_mode: LaunchMode
    """How the processes start (planning/modes.toml); its template renders this plan. The
    plan file names it (`mode = "torchrun"`)."""
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    cpus_per_task: int
    cpus_per_gpu: int
    """Cores for each training process; OMP_NUM_THREADS is set to this where srun starts each
    process, and to 1 where one launcher starts them all (torchrun's default)."""
    memory_gb_per_node: int | None = None
    """None: no --mem is written and the site's default applies."""
    time_seconds: int
    """The time limit."""
    exclusive: bool = False
    """The job must hold its nodes alone (sites that need --exclusive for whole nodes)."""
    gpu_request: str | None = None
    """How the site asks for GPUs per node, from its profile: `--gres=gpu:v100:{gpus}`;
    None on a CPU-only cluster."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables the job exports before starting training (network settings, OMP_NUM_THREADS)."""
    expand: tuple[str, ...] = ()
    """Names in `environment` whose values the job's shell expands; the others are quoted."""
    cpu_masks: tuple[str, ...] = ()
    """CPU mask for local task/GPU 0, 1, ... where the job holds whole nodes and the site
    knows them."""
    software: JobSoftware = field(default_factory=JobSoftware)
    extras: JobExtras = field(default_factory=JobExtras)
    script: str
    script_args: tuple[str, ...] = ()
    own_gpu_per_task: bool = False
    """Each task sees only its own GPU (srun mode, for scripts that use cuda:0)."""
    local_rank_option: str | None = None
    """The option that gives the script its local rank (deepspeed mode: --local_rank=N),
    or None when the script takes none."""
    account: str | None = None
    job_name: str | None = None
    global_batch_size: int | None = None
    accumulation_steps: int = 1
    per_gpu_batch_size: int | None = None
    billing: BillingEstimate | None = None
    gpu_memory_gb: float | None = None
    gpu_peak_tflops: float | None = None
    """Dense 16-bit peak of one GPU: training reads it from plan.toml for its MFU."""
    model_parameters: int | None = None
    memory_estimates: tuple[MemoryEstimate, ...] = ()
    """Memory per GPU under each strategy, for the model the request named."""
    suggested_strategy: str | None = None
    """For st.wrap(..., strategy=...): the least communication that fits."""
    warnings: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        """Training processes in total: one per GPU."""
        return self.nodes * self.gpus_per_node

    @property
    def mode(self) -> str:
        """The launch mode's name, as the plan file and the templates name it."""
        return self.launch_mode.name

    def to_dict(self) -> dict[str, Any]:
        """Plain data for TOML and JSON, the launch mode by its name; fields that are None
        are left out."""
        data = dataclasses.asdict(self) | {"launch_mode": self.mode}
        plain: dict[str, Any] = _without_none({_file_key(k): v for k, v in data.items()})
        return plain

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """The plan from `to_dict` data; wrong or missing fields raise pydantic's error, a
        launch mode that does not exist (an edited plan.toml) an error naming the known ones."""
        from pydantic import TypeAdapter

        fields = dict(data)
        if _MODE in fields:
            fields["launch_mode"] = launch_mode(str(fields.pop(_MODE)))
        return TypeAdapter(cls).validate_python(fields)


def write_plan(plan: Plan, path: Path) -> None:
    """Save the plan as TOML (runs/<name>/plan.toml)."""
    path.write_text(tomli_w.dumps(plan.to_dict(), multiline_strings=True), encoding="utf-8")


def read_plan(path: Path) -> Plan:
    """Load a saved plan; a damaged file is an error that says which field."""
    from pydantic import ValidationError

    hint = (
        "move that file away (or choose another --name) to submit the run with a new plan; "
        "it was left as it is."
    )
    text = read_text(path, "saved plan", hint=hint)
    try:
        return Plan.from_dict(parse_toml(text))
    except TomlError as error:
        problem = str(error)
    except ScaletrainError as error:  # a launch mode of another name
        problem = f"mode: {error.problem.rstrip('.')}; {error.hint.rstrip('.')}"
    except ValidationError as error:
        problem = "; ".join(
            f"{'.'.join(_file_key(part) for part in detail['loc'])}: {detail['msg']}"
            for detail in error.errors()
        )
    raise ScaletrainError(f"{path} is not a plan scaletrain can read: {problem}.", hint)


def _file_key(part: object) -> str:
    """A part of pydantic's location as the plan file names it."""
    return _MODE if part == "launch_mode" else str(part)


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list | tuple):
        return [_without_none(item) for item in value]
    return value
