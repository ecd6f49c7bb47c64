"""What a job needs beyond resources and software, as submitit's `additional_parameters` give
it: more #SBATCH options, launcher flags, shell lines, commands on every node before and after
training, and the precision for launchers that set it."""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.modes import LaunchMode

# What --precision may be.
PRECISIONS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobExtras:
    """Additions to a generated job, each written where the job script says."""

    sbatch: tuple[str, ...] = ()
    """More `#SBATCH` options, e.g. `--exclusive`, `--constraint=x`, `--mail-type=END`."""
    launcher_args: tuple[str, ...] = ()
    """Flags for the mode's launcher: torchrun's, `accelerate launch`'s; srun's in the modes
    where srun starts each process (srun, deepspeed, lightning)."""
    setup: tuple[str, ...] = ()
    """Shell lines in the batch script after the software setup (yours, run as written)."""
    before: tuple[str, ...] = ()
    """Shell commands run once on every node before training (staging data to local disk)."""
    after: tuple[str, ...] = ()
    """Shell commands run once on every node after training, whatever its result."""
    precision: str | None = None
    """bf16, fp16 or fp32 for launchers that take it (accelerate's --mixed_precision)."""

    def __post_init__(self) -> None:
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ScaletrainError(
                f"Unknown --precision {self.precision!r}.", f"use one of {', '.join(PRECISIONS)}."
            )

    def check_for(self, mode: LaunchMode, *, estimating_memory: bool) -> None:
        """Options a mode cannot honour are errors, not silently dropped. `--precision` also
        sets the memory estimate's precision: with a model to estimate, it is not dropped."""
        if self.precision is not None and mode.precision_option is None and not estimating_memory:
            raise ScaletrainError(
                f"--precision is given, but {mode.name}'s launcher takes no precision: your "
                "script or its config decides it.",
                "leave out --precision and set it where the script does (torch.autocast, "
                "Trainer(precision=...), bf16/fp16 in the DeepSpeed config), or use --mode "
                "accelerate.",
            )
