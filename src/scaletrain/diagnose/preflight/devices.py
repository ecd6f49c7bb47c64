"""Which GPUs a rank sees and which one it uses, from torch or from the visibility variables.

On a GPU node torch's count and the devices' UUIDs are the truth. Where torch sees no GPU
the *_VISIBLE_DEVICES variables alone decide (that is how a CPU machine simulates a node,
and how a job that sets them wrongly shows up before any GPU code runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.diagnose.preflight.results import CheckResult, fail, ok, skip
from scaletrain.runtime.device import choose_device, describe_visibility, visible_gpus
from scaletrain.runtime.layout import ProcessLayout

NAME = "devices"


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceView:
    """The devices a rank sees (identities in torch's order) and the one it will use."""

    visible: tuple[str, ...]
    used: str
    """'cpu', or the identity of this rank's GPU."""
    index: int | None
    """The used GPU's number among the node's physical GPUs when known, for CPU masks."""
    torch_device: str = "cpu"
    """What torch calls it: cuda:<n> when torch sees GPUs, else cpu."""


def view_devices(
    layout: ProcessLayout, environ: Mapping[str, str], gpu_identities: tuple[str, ...]
) -> DeviceView:
    """The rank's devices; `gpu_identities` are torch's GPUs (empty on a CPU machine).

    Raises LaunchEnvironmentError when this rank would have no GPU of its own.
    """
    from_variables = visible_gpus(environ)
    visible = gpu_identities or from_variables or ()
    if not visible:
        return DeviceView(visible=(), used="cpu", index=None)
    choice = choose_device(layout, len(visible), environ)
    position = choice.index or 0
    known = from_variables is not None and position < len(from_variables)
    physical = from_variables[position] if from_variables and known else str(position)
    return DeviceView(
        visible=tuple(visible),
        used=visible[position],
        index=int(physical) if physical.isdigit() else None,
        torch_device=str(choice) if gpu_identities else "cpu",
    )


def check_devices(
    layout: ProcessLayout,
    environ: Mapping[str, str],
    gpu_identities: tuple[str, ...],
    expected_per_node: int | None,
) -> tuple[CheckResult, DeviceView]:
    """Exactly the expected GPUs: one per task, or all of the node shared by local rank."""
    try:
        view = view_devices(layout, environ, gpu_identities)
    except LaunchEnvironmentError as error:
        return fail(NAME, error.problem, error.hint), DeviceView(visible=(), used="?", index=None)
    variables = describe_visibility(environ)
    seen = f"uses {view.used}, sees {len(view.visible)} ({variables})"
    if expected_per_node is None:
        return (ok(NAME, seen) if view.visible else skip(NAME, "no GPU: runs on the CPU")), view
    count = len(view.visible)
    if expected_per_node == 0:
        if count:
            return fail(
                NAME,
                f"sees {count} GPU(s) but the job expects CPU processes ({variables})",
                "request GPUs for the job (--gpus-per-node) or unset the *_VISIBLE_DEVICES",
            ), view
        return ok(NAME, "CPU process, as expected"), view
    if count not in (1, expected_per_node):
        return fail(
            NAME,
            f"sees {count} GPU(s); expected 1 (one task per GPU) "
            f"or all {expected_per_node} of the node ({variables})",
            f"ask Slurm for --gpus-per-node={expected_per_node} and do not narrow "
            "*_VISIBLE_DEVICES by hand, or give each task one GPU "
            "(ROCR_VISIBLE_DEVICES=$SLURM_LOCALID)",
        ), view
    return ok(NAME, seen), view
