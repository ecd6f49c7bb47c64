"""What the checks must know about the cluster, given as options or environment variables.

The job-script generator passes a cluster profile's numbers through these variables (one
table, one meaning each); `scaletrain check` and `python -m scaletrain.diagnose.preflight`
also take them as options. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are read as the
libraries read them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.core import variables
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.variables import Variable, variable_table

# The cluster knowledge that jobs pass to the checks, as variables of the one table
# (core/variables.toml: each has its option and help there).
EXPECTED_CPU_MASKS = variable_table()[variables.EXPECTED_CPU_MASKS]
EXPECTED_GPUS_PER_NODE = variable_table()[variables.EXPECTED_GPUS_PER_NODE]
DATALOADER_WORKERS = variable_table()[variables.DATALOADER_WORKERS]
MIN_FREE_GB = variable_table()[variables.MIN_FREE_GB]
RENDEZVOUS_TIMEOUT = variable_table()[variables.RENDEZVOUS_TIMEOUT]
EXPECT_NET_PLUGIN = variable_table()[variables.EXPECT_NET_PLUGIN]
SCRIPT_VARIABLES = variable_table()[variables.SCRIPT_VARIABLES]
# How long ranks wait for rank 0 to listen: as long as torchrun waits for its nodes to join
# (its rendezvous join_timeout); rank 0 may spend minutes importing torch from a busy file system.
DEFAULT_RENDEZVOUS_TIMEOUT_S = 600.0
INPUTS = (
    EXPECTED_CPU_MASKS,
    EXPECTED_GPUS_PER_NODE,
    DATALOADER_WORKERS,
    MIN_FREE_GB,
    RENDEZVOUS_TIMEOUT,
    EXPECT_NET_PLUGIN,
    SCRIPT_VARIABLES,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class PreflightInputs:
    """The cluster knowledge the checks compare against; None means 'not checked'."""

    expected_cpu_masks: tuple[int, ...] | None = None
    expected_gpus_per_node: int | None = None
    dataloader_workers: int | None = None
    min_free_bytes: int = 10**9
    rendezvous_timeout_s: float = DEFAULT_RENDEZVOUS_TIMEOUT_S
    expect_net_plugin: bool = False
    nccl_socket_ifname: str = ""
    gloo_socket_ifname: str = ""
    script_variables: tuple[str, ...] | None = None
    """What the training script reads from its launcher; None: not checked."""


def parse_cpu_masks(text: str) -> tuple[int, ...]:
    """'0xfe,0xfe00' (or Slurm's 'fe,fe00') -> (254, 65024)."""
    try:
        return tuple(int(mask, 16) for mask in text.replace(" ", "").split(",") if mask)
    except ValueError:
        raise ScaletrainError(
            f"{EXPECTED_CPU_MASKS.name}={text!r} is not a list of hex CPU masks.",
            "write them as for srun --cpu-bind=mask_cpu, e.g. 0xfe,0xfe00,0xfe0000.",
        ) from None


def _number(
    values: Mapping[str, str], spec: Variable, kind: type[int] | type[float]
) -> float | None:
    text = values.get(spec.name, "")
    if text == "":
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ScaletrainError(
            f"{spec.name}={text!r} is not a number.",
            f"set {spec.option} / {spec.name} to a {kind.__name__}, or leave it unset.",
        ) from None
    if value < 0:
        raise ScaletrainError(f"{spec.name}={text!r} is negative.", "use 0 or more.")
    return value


def read_inputs(values: Mapping[str, str]) -> PreflightInputs:
    """Inputs from environment-like values (variables named as in INPUTS)."""
    masks = values.get(EXPECTED_CPU_MASKS.name, "")
    gpus = _number(values, EXPECTED_GPUS_PER_NODE, int)
    workers = _number(values, DATALOADER_WORKERS, int)
    free_gb = _number(values, MIN_FREE_GB, float)
    timeout = _number(values, RENDEZVOUS_TIMEOUT, float)
    return PreflightInputs(
        expected_cpu_masks=parse_cpu_masks(masks) if masks else None,
        expected_gpus_per_node=None if gpus is None else int(gpus),
        dataloader_workers=None if workers is None else int(workers),
        min_free_bytes=int((1.0 if free_gb is None else free_gb) * 10**9),
        rendezvous_timeout_s=DEFAULT_RENDEZVOUS_TIMEOUT_S if timeout is None else max(timeout, 0.5),
        expect_net_plugin=values.get(EXPECT_NET_PLUGIN.name, "0") not in ("", "0", "no"),
        nccl_socket_ifname=values.get("NCCL_SOCKET_IFNAME", ""),
        gloo_socket_ifname=values.get("GLOO_SOCKET_IFNAME", ""),
        script_variables=tuple(
            name.strip()
            for name in values.get(SCRIPT_VARIABLES.name, "").split(",")
            if name.strip()
        )
        or None,
    )


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """One option per input; each overrides its environment variable."""
    for spec in INPUTS:
        parser.add_argument(str(spec.option), dest=spec.name, help=f"{spec.help} [{spec.name}]")


def given_values(options: argparse.Namespace) -> dict[str, str]:
    """The inputs given as options, keyed by their variable names."""
    return {spec.name: str(value) for spec in INPUTS if (value := getattr(options, spec.name))}
