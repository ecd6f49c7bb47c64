"""The cluster profile schema: what a site's TOML file may say, checked field by field.

One profile per file; the file name is the cluster name. Numbers are per node or per GPU
and come from the site's documentation (each packaged profile names its sources).

The classes are frozen dataclasses. pydantic checks a file against them when catalog.py reads
it: the types and constraints of their fields (constraints.py), then each `__post_init__`,
whose errors name the table they are in.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from scaletrain.clusters.billing import BillingRule
from scaletrain.clusters.constraints import (
    PositiveFloat,
    PositiveInt,
    Section,
    checked_by,
    not_empty,
)
from scaletrain.clusters.slurm_time import parse_slurm_time
from scaletrain.core.errors import ScaletrainError

_HEX_MASK = re.compile(r"^0x[0-9a-fA-F]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def _hex_masks(masks: tuple[str, ...]) -> tuple[str, ...]:
    for mask in masks:
        if not _HEX_MASK.match(mask):
            raise ValueError(f"{mask!r} is not a hexadecimal mask such as '0xfe'")
    return masks


def _gpu_option(option: str | None) -> str | None:
    example = "'--gpus-per-node={gpus}'"
    if option is not None and (not option.startswith("--") or "{gpus}" not in option):
        raise ValueError(f"{option!r} must be an sbatch option with {{gpus}}, e.g. {example}")
    if option is not None:
        try:
            option.format(gpus=1)
        except (KeyError, IndexError, ValueError):
            raise ValueError(
                f"{option!r} may hold no braces but {{gpus}} (write the GPU model itself, "
                f"e.g. '--gres=gpu:v100:{{gpus}}')"
            ) from None
    return option


def _date(date: str) -> str:
    if not _DATE.match(date):
        raise ValueError(f"{date!r} is not a date such as '2026-09' or '2026-09-14'")
    return date


def _slurm_time(text: str | None) -> str | None:
    if text is not None:
        try:
            parse_slurm_time(text)
        except ScaletrainError as error:
            raise ValueError(error.problem) from None
    return text


def _variable_names(environment: Environment) -> Environment:
    for name in environment:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
    return environment


@dataclass(frozen=True, kw_only=True, slots=True)
class Node(Section):
    """One compute node as a job sees it: what is usable, not what is installed."""

    gpus: PositiveInt
    """GPUs per node as Slurm counts them (LUMI: 8 GCDs); on a CPU cluster, process slots."""
    accelerator: Literal["nvidia", "amd", "cpu"]
    gpu_model: str
    gpu_memory_gb: PositiveFloat | None = None
    """Memory of one GPU as Slurm counts GPUs (one MI250X GCD: 64 GB); none on CPU clusters."""
    peak_tflops: PositiveFloat | None = None
    """Dense 16-bit matrix peak of one GPU (bf16, or fp16 where there is no bf16), in TFLOPS:
    the denominator of model FLOPs utilisation."""
    usable_cores: PositiveInt
    usable_memory_gb: PositiveInt | None = None
    """None where Slurm does not manage memory on this cluster."""
    cpu_masks: Annotated[tuple[str, ...], checked_by(_hex_masks)] = ()
    """Cores closest to GPU 0, 1, ... as hexadecimal masks for `srun --cpu-bind=mask_cpu:`."""

    @property
    def gpu_description(self) -> str:
        """`MI250X GCD (64 GB, 191.5 TFLOPS)`: the model, with memory and peak if known."""
        known = [
            f"{value:g} {unit}"
            for value, unit in ((self.gpu_memory_gb, "GB"), (self.peak_tflops, "TFLOPS"))
            if value is not None
        ]
        return f"{self.gpu_model} ({', '.join(known)})" if known else self.gpu_model

    def __post_init__(self) -> None:
        if self.cpu_masks and len(self.cpu_masks) != self.gpus:
            raise ValueError(f"cpu_masks has {len(self.cpu_masks)} masks for {self.gpus} GPUs")


@dataclass(frozen=True, kw_only=True, slots=True)
class Slurm(Section):
    """How this site wants resources written in a job script."""

    gpu_request: Annotated[str | None, checked_by(_gpu_option)] = None
    """The GPU option with `{gpus}` for GPUs per node: `--gpus-per-node={gpus}`,
    `--gres=gpu:v100:{gpus}`; none on a CPU-only cluster."""
    request_memory: bool = True
    """Whether to write `--mem` (Mahti assigns memory per GPU itself)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PerGpu(Section):
    """What the planner asks for per GPU unless told otherwise."""

    cores: PositiveInt
    memory_gb: PositiveInt | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Stack(Section):
    """One way the site's compute nodes provide PyTorch: module lines, or a container image
    (with the module that sets up its bindings, and the command that runs it)."""

    description: str = ""
    setup: tuple[str, ...] = ()
    """Shell lines in the batch script before anything runs, e.g. `module load pytorch`, or
    the container bindings module."""
    image: str | None = None
    """A container image: every task runs in it (`container_command IMAGE ...`)."""
    container_command: str | None = None
    """How to run a command in an image, e.g. `singularity run`, `apptainer exec`."""
    binds: tuple[str, ...] = ()
    """Folders to bind into the container beyond what `setup` binds (`src[:dest[:opts]]`)."""

    def __post_init__(self) -> None:
        if self.image is not None and not self.container_command:
            raise ValueError("image needs container_command, e.g. 'singularity run'")

    @property
    def is_container(self) -> bool:
        """Whether this stack runs tasks in a container (an image, or one given per job)."""
        return self.container_command is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class Software(Section):
    """How jobs get PyTorch on the compute nodes: the site's stacks, and per-task lines."""

    default: str | None = None
    """The stack jobs use unless they choose another (`--stack`, `--container`)."""
    stacks: dict[str, Stack] = field(default_factory=dict)
    task_setup: tuple[str, ...] = ()
    """Shell lines at the start of every task, where $SLURM_NODEID, $SLURM_LOCALID are the
    task's own (e.g. a cache folder per node on local disk)."""
    guide: str = "README.md#install-on-a-cluster"
    """Where scaletrain's docs say how to add packages at this site (hints point there)."""

    def __post_init__(self) -> None:
        if self.default is not None and self.default not in self.stacks:
            known = ", ".join(self.stacks) or "none"
            raise ValueError(f"default = {self.default!r} names no [software.stacks] ({known})")
        if self.default is None and self.stacks:
            raise ValueError(f"default is missing: name one of {', '.join(self.stacks)}")


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvironmentValue(Section):
    """A variable whose value the job's shell expands (`$USER`, `${SLURM_JOB_ACCOUNT}`)."""

    value: str
    expand: bool = False
    """False: exported exactly as written (quoted); true: expanded by the job's shell."""


# [environment]: a value as written, or a table that says how the job's shell takes it.
Environment = dict[str, str | EnvironmentValue]


@dataclass(frozen=True, kw_only=True, slots=True)
class Source(Section):
    """Where a setting comes from and when it was checked: shown by `clusters show`."""

    date: Annotated[str, checked_by(_date)]
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Billing(Section):
    unit: str
    meaning: str = ""
    """What one unit buys, in words (LUMI: one hour of a full MI250X = two GCD-hours)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Partition(Section):
    description: str = ""
    max_time: Annotated[str | None, checked_by(_slurm_time)] = None
    """Longest `--time` (Slurm syntax); none for no limit."""
    max_nodes: PositiveInt | None = None
    max_gpus: PositiveInt | None = None
    """Most GPUs one job may hold in total."""
    max_gpus_per_node: PositiveInt | None = None
    """Fewer than a node has where the partition shares nodes (Mahti gpusmall: 2)."""
    whole_nodes: bool = False
    """The partition allocates and bills whole nodes (LUMI standard-g, Mahti gpumedium)."""
    exclusive: bool = False
    """Write `--exclusive` (sites that need it to hand out whole nodes)."""
    auto: bool = True
    """Whether the planner may choose it; test partitions say false."""
    rehearsal: bool = False
    """The partition for rehearsals (`submit --rehearse`): the site's short debug partition
    (LUMI dev-g, Puhti and Mahti gputest). At most one per profile."""
    billing: BillingRule | None = None
    """None where nothing is billed (a local test cluster)."""

    @property
    def max_time_seconds(self) -> int | None:
        return None if self.max_time is None else parse_slurm_time(self.max_time)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterProfile(Section):
    """A cluster: its nodes, partitions, Slurm syntax, network settings and billing."""

    name: str
    source: str
    """The file it was read from."""
    description: str
    node: Node
    slurm: Slurm = field(default_factory=Slurm)
    default_per_gpu: PerGpu
    environment: Annotated[Environment, checked_by(_variable_names)] = field(default_factory=dict)
    """Exported in every job, e.g. NCCL_SOCKET_IFNAME for the high-speed network."""
    software: Software = field(default_factory=Software)
    billing: Billing | None = None
    partitions: Annotated[dict[str, Partition], not_empty()]
    sources: dict[str, Source] = field(default_factory=dict)
    """Date and source of settings, by their dotted name: `environment.FI_MR_CACHE_MONITOR`."""

    def __post_init__(self) -> None:
        self._sources_name_settings()
        self._consistent()

    def _sources_name_settings(self) -> None:
        data = dataclasses.asdict(self)
        for key in self.sources:
            value: Any = data
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                raise ValueError(f"sources: {key!r} names no setting of this profile")

    @property
    def exported(self) -> dict[str, str]:
        """Every variable of [environment] with its value as written."""
        return {
            name: value.value if isinstance(value, EnvironmentValue) else value
            for name, value in self.environment.items()
        }

    @property
    def expanded(self) -> tuple[str, ...]:
        """The variables of [environment] whose values the job's shell expands."""
        return tuple(
            name
            for name, value in self.environment.items()
            if isinstance(value, EnvironmentValue) and value.expand
        )

    def source_of(self, key: str) -> str | None:
        """'2026-09, <source>' for a setting with a recorded source."""
        found = self.sources.get(key)
        return f"{found.date}, {found.source}" if found else None

    def _consistent(self) -> None:
        node, per_gpu = self.node, self.default_per_gpu
        if per_gpu.cores * node.gpus > node.usable_cores:
            raise ValueError(
                f"default_per_gpu.cores = {per_gpu.cores} × {node.gpus} GPUs is more than "
                f"node.usable_cores = {node.usable_cores}"
            )
        if self.slurm.request_memory:
            if node.usable_memory_gb is None or per_gpu.memory_gb is None:
                raise ValueError(
                    "slurm.request_memory needs node.usable_memory_gb and "
                    "default_per_gpu.memory_gb (or set request_memory = false)"
                )
            if per_gpu.memory_gb * node.gpus > node.usable_memory_gb:
                raise ValueError(
                    f"default_per_gpu.memory_gb = {per_gpu.memory_gb} × {node.gpus} GPUs is more "
                    f"than node.usable_memory_gb = {node.usable_memory_gb}"
                )
        for name, partition in self.partitions.items():
            if (partition.max_gpus_per_node or 0) > node.gpus:
                raise ValueError(
                    f"partitions.{name}.max_gpus_per_node is more than node.gpus = {node.gpus}"
                )
        if any(partition.billing for partition in self.partitions.values()) and not self.billing:
            raise ValueError("partitions have billing rules but [billing] names no unit")
        rehearsals = [name for name, partition in self.partitions.items() if partition.rehearsal]
        if len(rehearsals) > 1:
            raise ValueError(
                f"partitions {', '.join(rehearsals)} all say rehearsal = true: at most one may"
            )

    @property
    def rehearsal_partition(self) -> str | None:
        """The partition rehearsals run in (`submit --rehearse`), if the profile names one."""
        return next((name for name, part in self.partitions.items() if part.rehearsal), None)

    def gpus_per_node_limit(self, partition: str) -> int:
        """Most GPUs per node a job may hold in this partition."""
        return self.partitions[partition].max_gpus_per_node or self.node.gpus

    @property
    def fair_share_cores(self) -> int:
        """Cores per GPU that leave every other GPU of the node its equal share."""
        return self.node.usable_cores // self.node.gpus

    @property
    def fair_share_memory_gb(self) -> int | None:
        memory = self.node.usable_memory_gb
        return None if memory is None else memory // self.node.gpus
