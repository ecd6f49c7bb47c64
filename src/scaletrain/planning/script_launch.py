"""How a script is started in its launch mode, from what it shows of itself (script_facts.py):
which GPUs each task sees, and whether it gets DeepSpeed's --local_rank. Each decision comes
with the reason `submit` shows, and an option forces it either way.

Two ways of giving a task its GPU are common in the scripts users bring, and each breaks
under the other: `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` needs every GPU of the
node visible (with one visible, local rank 1 is "invalid device ordinal"); `cuda:0` behind a
per-task visibility wrapper (seed 003's select_gpu) needs each task to see only its own (with
all visible, every task of a node takes GPU 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.modes import LaunchMode
from scaletrain.planning.script_facts import ScriptFacts

NODE_GPUS = "node"
"""--visible-gpus node: every task sees all GPUs of its node, in order."""
OWN_GPU = "own"
"""--visible-gpus own: each task sees only its own GPU, as cuda:0."""
VISIBLE_GPUS_CHOICES = (NODE_GPUS, OWN_GPU)
DEFAULT_LOCAL_RANK_OPTION = "--local_rank"


@dataclass(frozen=True, slots=True)
class Decision:
    """A choice about how the script starts, and why, in words for the user."""

    value: bool | str | None
    why: str


def visible_gpus(mode: LaunchMode, facts: ScriptFacts, asked: str | None) -> Decision:
    """Whether each task sees only its own GPU (True) or every GPU of its node (False)."""
    if asked is not None and asked not in VISIBLE_GPUS_CHOICES:
        raise ScaletrainError(
            f"--visible-gpus {asked!r} is not one of {', '.join(VISIBLE_GPUS_CHOICES)}.",
            "give 'node' (the script picks cuda:<LOCAL_RANK>) or 'own' (it uses cuda:0).",
        )
    if not mode.own_gpu_if_script_wants:
        if asked == OWN_GPU:
            raise ScaletrainError(
                f"--visible-gpus own needs a mode where srun starts the script itself, and "
                f"{mode.name} does not.",
                "use --mode srun, or leave out --visible-gpus.",
            )
        return Decision(False, "every GPU of the node; each process picks cuda:<local rank>")
    if asked is not None:
        return Decision(asked == OWN_GPU, f"--visible-gpus {asked}")
    if facts.device_by_local_rank:
        reads = ", ".join(facts.device_by_local_rank)
        return Decision(False, f"every GPU of the node: the script reads {reads} to pick one")
    if facts.device_zero:
        uses = ", ".join(facts.device_zero)
        return Decision(True, f"only its own GPU, as cuda:0: the script uses {uses}")
    return Decision(False, "every GPU of the node; LOCAL_RANK says which is the task's")


def local_rank_option(mode: LaunchMode, facts: ScriptFacts, asked: bool | None) -> Decision:
    """The option that gives the script its local rank (e.g. --local_rank), or None."""
    if not mode.local_rank_option:
        if asked:
            raise ScaletrainError(
                f"--local-rank-arg passes DeepSpeed's --local_rank, and {mode.name}'s launcher "
                "passes none.",
                "use --mode deepspeed, or leave out --local-rank-arg.",
            )
        return Decision(None, "")
    if asked is not None:
        option = (facts.local_rank_option or DEFAULT_LOCAL_RANK_OPTION) if asked else None
        return Decision(option, f"--local-rank-arg {'yes' if asked else 'no'}")
    if facts.local_rank_option:
        option = facts.local_rank_option
        return Decision(option, f"{option}=<local rank>: the script's parser takes it")
    if facts.parses_arguments:
        return Decision(None, "no --local_rank: the script's parser does not take it")
    return Decision(None, "no --local_rank: the script reads no arguments that take it")
