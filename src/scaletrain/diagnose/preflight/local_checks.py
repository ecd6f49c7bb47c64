"""Checks one rank makes about itself before joining the group: launcher, CPU affinity,
threads, network interfaces, run folder. Each takes what it compares as arguments."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Collection, Mapping
from pathlib import Path

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.core.torch_support import torch_support, untested
from scaletrain.diagnose.preflight.results import CheckResult, compact_list, fail, ok, skip, warn
from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.layout import ProcessLayout
from scaletrain.runtime.network import interface_is_up, select_interfaces


def cpus_of_mask(mask: int) -> set[int]:
    return {bit for bit in range(mask.bit_length()) if mask >> bit & 1}


def check_launcher(environ: Mapping[str, str]) -> tuple[CheckResult, ProcessLayout | None]:
    """Which launcher started this process and where it puts the process."""
    try:
        layout = detect_layout(environ)
    except LaunchEnvironmentError as error:
        return fail("launcher", error.problem, error.hint), None
    seen = (
        f"{layout.launcher}: rank {layout.rank}/{layout.world_size}, "
        f"local {layout.local_rank}/{layout.local_world_size}, "
        f"node {layout.node_rank}/{layout.num_nodes}, "
        f"master {layout.master_addr}:{layout.master_port}"
    )
    return ok("launcher", seen), layout


# torch's env:// variables and the layout field each must agree with.
_LAYOUT_FIELDS = {
    "RANK": "rank",
    "LOCAL_RANK": "local_rank",
    "WORLD_SIZE": "world_size",
    "LOCAL_WORLD_SIZE": "local_world_size",
}


def check_script_variables(
    environ: Mapping[str, str], names: tuple[str, ...] | None, layout: ProcessLayout
) -> CheckResult:
    """The variables the training script will read in this launch mode: set, and (torch's)
    saying the same as the launcher."""
    name = "script-variables"
    if not names:
        return skip(name, "no variables named for the script")
    missing = [variable for variable in names if environ.get(variable, "") == ""]
    if missing:
        return fail(
            name,
            f"the script will read {', '.join(missing)}, not set here "
            f"(launcher: {layout.launcher})",
            "start it as its own launcher would (torchrun sets RANK/LOCAL_RANK/WORLD_SIZE; "
            "under srun export them per task: RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
            "WORLD_SIZE=$SLURM_NTASKS), or use the launch mode the script was written for",
        )
    wrong = [
        f"{variable}={environ[variable]} (launcher: {getattr(layout, field)})"
        for variable, field in _LAYOUT_FIELDS.items()
        if variable in names and environ[variable] != str(getattr(layout, field))
    ]
    if wrong:
        return fail(
            name,
            f"the script will read {', '.join(wrong)}",
            "do not set these by hand; let the launcher set them",
        )
    return ok(name, f"{', '.join(names)} set")


def check_affinity(
    cpus: Collection[int], gpu_index: int | None, local_rank: int, masks: tuple[int, ...] | None
) -> CheckResult:
    """This rank's cores against the expected mask of its GPU (of its local rank on CPUs)."""
    name, have = "cpu-affinity", set(cpus)
    if masks is None:
        return skip(name, f"cores {compact_list(have)} (no expected masks given)")
    index, what = (gpu_index, f"GPU {gpu_index}") if gpu_index is not None else (local_rank, "")
    what = what or f"local rank {local_rank}"
    if index >= len(masks):
        return fail(
            name,
            f"no expected CPU mask for {what}: {len(masks)} mask(s) given",
            "give one mask per GPU of the node (the cluster profile's list)",
        )
    expected = cpus_of_mask(masks[index])
    seen = f"cores {compact_list(have)}; {what} is nearest to {compact_list(expected)}"
    bind = "bind each task to its GPU's cores: srun --cpu-bind=mask_cpu:" + ",".join(
        hex(mask) for mask in masks
    )
    if have == expected:
        return ok(name, seen)
    if have > expected:
        return warn(name, f"not bound: {seen}", bind)
    return fail(name, seen, bind)


def check_threads(
    *, torch_threads: int, omp_variable: str | None, cores: int, workers: int | None
) -> CheckResult:
    """Compute threads and DataLoader workers must fit the cores this rank may use."""
    name = "threads"
    omp = f"OMP_NUM_THREADS={omp_variable}" if omp_variable else "OMP_NUM_THREADS unset"
    seen = f"{torch_threads} torch thread(s) ({omp}) on {cores} core(s)"
    if workers is not None:
        seen += f", {workers} DataLoader worker(s)"
    if torch_threads > cores:
        return fail(
            name,
            seen,
            f"export OMP_NUM_THREADS={cores} (the cores of one rank: SLURM_CPUS_PER_TASK "
            "under srun, cores / processes per node under torchrun)",
        )
    if workers and workers + 1 > cores:
        return fail(
            name,
            seen + ": workers and the training loop need more cores than the rank has",
            f"use at most {max(cores - 1, 0)} DataLoader worker(s) per rank, or ask for more "
            "--cpus-per-task (scaletrain.loader picks cores - 1 by itself)",
        )
    return ok(name, seen)


def check_socket_interfaces(variable: str, value: str, *, exact: bool = False) -> CheckResult:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME must name interfaces this node has, up."""
    name, host = variable.lower().replace("_", "-"), socket.gethostname()
    if not value:
        return skip(name, f"{variable} unset: the library picks an interface itself")
    present = [interface for _, interface in socket.if_nameindex()]
    chosen = select_interfaces(value, present, exact=exact)
    fix = (
        f"set {variable} to interfaces this node has (LUMI's Slingshot: hsn0,hsn1,hsn2,hsn3), "
        "or unset it"
    )
    if not chosen:
        return fail(
            name,
            f"{variable}={value} matches no interface of {host} (it has {', '.join(present)})",
            fix,
        )
    down = [interface for interface in chosen if not interface_is_up(interface)]
    if len(down) == len(chosen):
        return fail(name, f"{variable}={value} selects {', '.join(chosen)}, all down", fix)
    return ok(name, f"{variable}={value} selects {', '.join(chosen)}")


# File descriptors a rank may need besides its connections: libraries, logs, checkpoint
# files, DataLoader workers' pipes.
_OTHER_DESCRIPTORS = 256
# Full-mesh gloo groups a rank may hold: the default group of CPU training and the
# Checkpointer's two bookkeeping groups (NCCL + asynchronous saves); each is one socket
# to every other rank (docs/checkpoints.md).
_GLOO_GROUPS_AT_MOST = 3


def open_files_needed(world_size: int, rank: int) -> int:
    """Descriptors a rank needs at most: a socket per other rank in each gloo group, on rank
    0 also the rendezvous store's connection from every rank, and the rest."""
    store_connections = world_size if rank == 0 else 0
    return _GLOO_GROUPS_AT_MOST * (world_size - 1) + store_connections + _OTHER_DESCRIPTORS


def check_open_files(soft: int, hard: int, world_size: int, rank: int) -> CheckResult:
    """`ulimit -n` against the sockets the job's groups will open (gloo#327: full-mesh set-up
    fails with 'Too many open files' near 512 ranks under the usual limit of 1024)."""
    name = "open-files"
    need = open_files_needed(world_size, rank)
    seen = f"ulimit -n {soft} (hard {hard}); {world_size} ranks need up to {need} per process"
    if soft < 0 or soft >= need:  # -1: RLIM_INFINITY
        return ok(name, seen)
    if hard < 0 or hard >= need:
        return fail(
            name, seen, "raise the limit in the job script before srun: ulimit -n $(ulimit -Hn)"
        )
    return fail(
        name,
        seen,
        f"the hard limit is below {need}: ask the site to raise it, or run fewer ranks "
        "(more work per GPU) until it is",
    )


def check_run_folder_writable(root: Path | None) -> CheckResult:
    """Every rank may write logs, metrics and checkpoint shards into the run folder."""
    name = "run-folder"
    if root is None:
        return skip(name, "no run folder (SCALETRAIN_RUN_DIR unset)")
    probe = root / f".preflight-{socket.gethostname()}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as error:
        return fail(
            name,
            f"cannot write to {root}: {error.strerror or error}",
            "put runs where every node can write (--runs-dir on project or scratch space)",
        )
    return ok(name, f"{root} is writable")


def check_free_space(root: Path | None, min_free_bytes: int) -> CheckResult:
    """Room for checkpoints on the run folder's file system."""
    name = "free-space"
    if root is None:
        return skip(name, "no run folder (SCALETRAIN_RUN_DIR unset)")
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(existing).free
    seen = f"{free / 1e9:,.1f} GB free (need {min_free_bytes / 1e9:g} GB)"
    if free < min_free_bytes:
        return fail(
            name, seen, "free space or move --runs-dir to a file system with room (scratch)"
        )
    return ok(name, seen)


def check_torch_version(version: str) -> CheckResult:
    """The torch of this rank, against the releases scaletrain is tested with."""
    note = untested(version)
    if note:
        return warn(
            "torch", note, f"scaletrain is tested with torch {torch_support().tested_range}"
        )
    return ok("torch", f"torch {version} (tested: {torch_support().tested_range})")
