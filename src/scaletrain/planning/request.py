"""What the user asks for: a script, GPUs (or nodes × GPUs per node), a time, a launch mode."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.memory import ModelSize
from scaletrain.planning.modes import DEFAULT_MODE
from scaletrain.planning.script_facts import ScriptFacts
from scaletrain.planning.software import SoftwareChoice

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_assignments(option: str, given: Sequence[str]) -> dict[str, str]:
    """`--env NAME=VALUE` options as a mapping (the name is checked by `Request`)."""
    assignments = {}
    for item in given:
        name, equals, value = item.partition("=")
        if not equals:
            raise ScaletrainError(
                f"{option} {item!r} is not NAME=VALUE.", f"write e.g. {option} HF_HOME=/scratch/hf."
            )
        assignments[name] = value
    return assignments


@dataclass(frozen=True, kw_only=True, slots=True)
class Request:
    """A resource request before planning; None means "choose for me"."""

    cluster: str
    script: str
    script_args: tuple[str, ...] = ()
    time: str
    """Wall time in Slurm syntax, e.g. 2:00:00 or 1-12:00:00."""
    gpus: int | None = None
    """GPUs in total; the planner spreads them over whole nodes."""
    nodes: int | None = None
    gpus_per_node: int | None = None
    partition: str | None = None
    mode: str = DEFAULT_MODE
    cpus_per_gpu: int | None = None
    memory_gb_per_gpu: int | None = None
    global_batch_size: int | None = None
    """Samples per optimizer step over all GPUs; checked to split evenly."""
    accumulation_steps: int = 1
    account: str | None = None
    job_name: str | None = None
    model: ModelSize | None = None
    """The model to train, for the estimate of memory per GPU under each strategy."""
    software: SoftwareChoice = field(default_factory=SoftwareChoice)
    extras: JobExtras = field(default_factory=JobExtras)
    environment: dict[str, str] = field(default_factory=dict)
    """Variables to export (over the profile's), written as given, quoted."""
    expand: tuple[str, ...] = ()
    """Names in `environment` whose values the job's shell expands ($USER, ${SLURM_JOB_ID})."""
    script_facts: ScriptFacts = field(default_factory=ScriptFacts)
    """What the script shows of itself (read by `submit` from the file)."""
    visible_gpus: str | None = None
    """'node' or 'own': which GPUs each srun task sees; None: decided from the script."""
    local_rank_argument: bool | None = None
    """Pass DeepSpeed's --local_rank to the script; None: when its parser takes it."""

    def __post_init__(self) -> None:
        counts = {
            "--gpus": self.gpus,
            "--nodes": self.nodes,
            "--gpus-per-node": self.gpus_per_node,
            "--cpus-per-gpu": self.cpus_per_gpu,
            "--memory-per-gpu": self.memory_gb_per_gpu,
            "--global-batch-size": self.global_batch_size,
            "--accumulation-steps": self.accumulation_steps,
        }
        for option, value in counts.items():
            if value is not None and value < 1:
                raise ScaletrainError(
                    f"{option} {value} is not a positive number.",
                    f"give {option} a whole number of at least 1.",
                )
        if self.gpus is not None and (self.nodes is not None or self.gpus_per_node is not None):
            raise ScaletrainError(
                "Give either --gpus or --nodes/--gpus-per-node, not both.",
                f"--gpus {self.gpus} alone lets the planner fill whole nodes.",
            )
        for name in self.environment:
            if not _ENV_NAME.fullmatch(name):
                raise ScaletrainError(
                    f"{name!r} is not an environment variable name.",
                    "write --env NAME=VALUE with a name of letters, digits and _.",
                )
        if self.gpus is None and self.nodes is None and self.gpus_per_node is None:
            raise ScaletrainError(
                "The request names no GPUs.",
                "add --gpus N (in total), or --nodes N --gpus-per-node G.",
            )
