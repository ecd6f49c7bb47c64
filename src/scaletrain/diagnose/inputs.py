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

from scaletrain.errors import ScaletrainError


@dataclass(frozen=True, kw_only=True, slots=True)
class Input:
    variable: str
    option: str
    help: str


EXPECTED_CPU_MASKS = Input(
    variable="SCALETRAIN_EXPECTED_CPU_MASKS",
    option="--expected-cpu-masks",
    help=(
        "CPU mask of each GPU, in GPU order, comma-separated hex as for srun --cpu-bind="
        "mask_cpu (LUMI: 0xfe000000000000,0xfe00000000000000,...). Without GPUs: per local rank."
    ),
)
EXPECTED_GPUS_PER_NODE = Input(
    variable="SCALETRAIN_EXPECTED_GPUS_PER_NODE",
    option="--expected-gpus-per-node",
    help="GPUs every node must use (0 for CPU processes); unset: not checked.",
)
DATALOADER_WORKERS = Input(
    variable="SCALETRAIN_DATALOADER_WORKERS",
    option="--dataloader-workers",
    help="DataLoader workers each rank will start; unset: scaletrain's default (cores - 1).",
)
MIN_FREE_GB = Input(
    variable="SCALETRAIN_MIN_FREE_GB",
    option="--min-free-gb",
    help="Free space the run folder needs for checkpoints, in GB (default 1).",
)
RENDEZVOUS_TIMEOUT = Input(
    variable="SCALETRAIN_RENDEZVOUS_TIMEOUT",
    option="--rendezvous-timeout",
    help="Seconds to wait for MASTER_ADDR:MASTER_PORT to answer (default 10).",
)
EXPECT_NET_PLUGIN = Input(
    variable="SCALETRAIN_EXPECT_NET_PLUGIN",
    option="--expect-net-plugin",
    help=(
        "1 when the cluster has a collective network plugin (LUMI: aws-ofi-rccl) that "
        "multi-node GPU jobs must load; then falling back to TCP sockets fails the check."
    ),
)
INPUTS = (
    EXPECTED_CPU_MASKS,
    EXPECTED_GPUS_PER_NODE,
    DATALOADER_WORKERS,
    MIN_FREE_GB,
    RENDEZVOUS_TIMEOUT,
    EXPECT_NET_PLUGIN,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class PreflightInputs:
    """The cluster knowledge the checks compare against; None means 'not checked'."""

    expected_cpu_masks: tuple[int, ...] | None = None
    expected_gpus_per_node: int | None = None
    dataloader_workers: int | None = None
    min_free_bytes: int = 10**9
    rendezvous_timeout_s: float = 10.0
    expect_net_plugin: bool = False
    nccl_socket_ifname: str = ""
    gloo_socket_ifname: str = ""


def parse_cpu_masks(text: str) -> tuple[int, ...]:
    """'0xfe,0xfe00' (or Slurm's 'fe,fe00') -> (254, 65024)."""
    try:
        return tuple(int(mask, 16) for mask in text.replace(" ", "").split(",") if mask)
    except ValueError:
        raise ScaletrainError(
            f"{EXPECTED_CPU_MASKS.variable}={text!r} is not a list of hex CPU masks.",
            "write them as for srun --cpu-bind=mask_cpu, e.g. 0xfe,0xfe00,0xfe0000.",
        ) from None


def _number(values: Mapping[str, str], spec: Input, kind: type[int] | type[float]) -> float | None:
    text = values.get(spec.variable, "")
    if text == "":
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ScaletrainError(
            f"{spec.variable}={text!r} is not a number.",
            f"set {spec.option} / {spec.variable} to a {kind.__name__}, or leave it unset.",
        ) from None
    if value < 0:
        raise ScaletrainError(f"{spec.variable}={text!r} is negative.", "use 0 or more.")
    return value


def read_inputs(values: Mapping[str, str]) -> PreflightInputs:
    """Inputs from environment-like values (variables named as in INPUTS)."""
    masks = values.get(EXPECTED_CPU_MASKS.variable, "")
    gpus = _number(values, EXPECTED_GPUS_PER_NODE, int)
    workers = _number(values, DATALOADER_WORKERS, int)
    free_gb = _number(values, MIN_FREE_GB, float)
    timeout = _number(values, RENDEZVOUS_TIMEOUT, float)
    return PreflightInputs(
        expected_cpu_masks=parse_cpu_masks(masks) if masks else None,
        expected_gpus_per_node=None if gpus is None else int(gpus),
        dataloader_workers=None if workers is None else int(workers),
        min_free_bytes=int((1.0 if free_gb is None else free_gb) * 10**9),
        rendezvous_timeout_s=10.0 if timeout is None else max(timeout, 0.5),
        expect_net_plugin=values.get(EXPECT_NET_PLUGIN.variable, "0") not in ("", "0", "no"),
        nccl_socket_ifname=values.get("NCCL_SOCKET_IFNAME", ""),
        gloo_socket_ifname=values.get("GLOO_SOCKET_IFNAME", ""),
    )


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """One option per input; each overrides its environment variable."""
    for spec in INPUTS:
        parser.add_argument(spec.option, dest=spec.variable, help=f"{spec.help} [{spec.variable}]")


def given_values(options: argparse.Namespace) -> dict[str, str]:
    """The inputs given as options, keyed by their variable names."""
    return {
        spec.variable: str(value) for spec in INPUTS if (value := getattr(options, spec.variable))
    }
