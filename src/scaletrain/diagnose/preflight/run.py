"""Preflight checks on every rank, before training: `python -m scaletrain.diagnose.preflight`.

Works under any launcher (srun with one task per GPU, torchrun, mpirun, plain python).
Each rank checks itself; the rendezvous address is tested before joining, so a wrong
MASTER_ADDR fails in seconds. Then the ranks join, gather their results on every rank,
and rank 0 prints one table (and writes report/preflight.json into the run folder).
Exit code 1 when any check failed, so that a job script stops before training.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import socket
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import HANG_LIMIT
from scaletrain.diagnose.preflight.devices import check_devices
from scaletrain.diagnose.preflight.gpu import (
    check_communication,
    collective_library,
    gpu_identities,
    loaded_net_plugins,
    nccl_debug_variables,
    read_nccl_log,
)
from scaletrain.diagnose.preflight.group_checks import (
    SHARED_FILE,
    check_all_reduce,
    check_shared_folder,
)
from scaletrain.diagnose.preflight.inputs import (
    PreflightInputs,
    add_input_options,
    given_values,
    read_inputs,
)
from scaletrain.diagnose.preflight.job_checks import job_checks
from scaletrain.diagnose.preflight.local_checks import (
    check_affinity,
    check_free_space,
    check_launcher,
    check_open_files,
    check_run_folder_writable,
    check_script_variables,
    check_socket_interfaces,
    check_threads,
    check_torch_version,
)
from scaletrain.diagnose.preflight.rendezvous import (
    IMPORTING,
    JOINING,
    check_rendezvous,
    note_rank0,
)
from scaletrain.diagnose.preflight.report import (
    PREFLIGHT_JSON,
    preflight_record,
    show_preflight,
    show_rank_alone,
    write_json,
)
from scaletrain.diagnose.preflight.results import CheckResult, RankFacts, RankReport, fail
from scaletrain.runtime.layout import ProcessLayout, cpus_per_process
from scaletrain.runtime.network import agent_hosts_store


def _local_checks(
    layout: ProcessLayout,
    environ: Mapping[str, str],
    inputs: PreflightInputs,
    root: Path | None,
    early: list[CheckResult],
) -> tuple[list[CheckResult], RankFacts]:
    import torch

    task = f"{socket.gethostname()} pid {os.getpid()}"
    devices, view = check_devices(
        layout, environ, gpu_identities(torch, environ, task), inputs.expected_gpus_per_node
    )
    cpus = os.sched_getaffinity(0)
    results = [
        *early,
        devices,
        check_affinity(cpus, view.index, layout.local_rank, inputs.expected_cpu_masks),
        check_threads(
            torch_threads=torch.get_num_threads(),
            omp_variable=environ.get("OMP_NUM_THREADS"),
            cores=cpus_per_process(layout, environ, len(cpus)),
            workers=inputs.dataloader_workers,
        ),
        check_socket_interfaces("NCCL_SOCKET_IFNAME", inputs.nccl_socket_ifname),
        check_socket_interfaces("GLOO_SOCKET_IFNAME", inputs.gloo_socket_ifname, exact=True),
        check_run_folder_writable(root),
        check_free_space(root, inputs.min_free_bytes),
        check_open_files(
            *resource.getrlimit(resource.RLIMIT_NOFILE), layout.world_size, layout.rank
        ),
        check_torch_version(torch.__version__),
    ]
    facts = RankFacts(
        host=socket.gethostname(),
        launcher=layout.launcher,
        rank=layout.rank,
        local_rank=layout.local_rank,
        world_size=layout.world_size,
        local_world_size=layout.local_world_size,
        node_rank=layout.node_rank,
        master=f"{layout.master_addr}:{layout.master_port}",
        device=view.used,
        torch_device=view.torch_device,
        visible_devices=view.visible,
        cpus=tuple(sorted(cpus)),
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
    )
    return results, facts


def _group_checks(
    layout: ProcessLayout,
    inputs: PreflightInputs,
    root: Path | None,
    writable: bool,
    backend: str,
    nccl_folder: Path | None,
    torch_device: str,
) -> list[CheckResult]:
    import torch

    from scaletrain.runtime.process_group import all_gather_objects

    token = secrets.token_hex(8) if layout.rank == 0 and root and writable else None
    if token and root:
        (root / SHARED_FILE).write_text(token, encoding="utf-8")
    gathered = all_gather_objects((token, torch_device))
    # One device type for everyone, or the collective would wait forever.
    on_gpu = all(device.startswith("cuda") for _, device in gathered)
    device = torch.device(torch_device if on_gpu else "cpu")
    results = [
        check_shared_folder(root, gathered[0][0]),
        check_all_reduce(device, layout.rank, layout.world_size),
    ]
    results.append(
        check_communication(
            backend=backend if on_gpu else "gloo",
            library=collective_library(torch),
            plugins=loaded_net_plugins(
                Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
            )
            if on_gpu
            else [],
            nccl_log=read_nccl_log(nccl_folder, os.getpid()) if nccl_folder else "",
            multi_node=layout.num_nodes > 1,
            expect_plugin=inputs.expect_net_plugin,
        )
    )
    return results


def run_preflight(
    environ: Mapping[str, str], inputs: PreflightInputs, *, verbose: bool = False
) -> int:
    """All checks on this rank; returns the process exit code (0 passed, 1 failed)."""
    host = socket.gethostname()
    launcher, layout = check_launcher(environ)
    if layout is None:
        show_rank_alone(console.notes(), host, [launcher])
        return 1
    folder = RunFolder.from_environ(environ)
    root = folder.root if folder else None
    early = [
        launcher,
        check_script_variables(environ, inputs.script_variables, layout),
        check_rendezvous(layout, environ, inputs.rendezvous_timeout_s, folder),
    ]
    who = f"rank {layout.rank} ({host})"
    if early[-1].failed:
        show_rank_alone(console.notes(), who, early)
        return 1
    hosts_store = layout.rank == 0 and layout.world_size > 1 and not agent_hosts_store(environ)
    if hosts_store:
        note_rank0(folder, environ, IMPORTING)

    import torch

    from scaletrain.runtime.process_group import all_gather_objects, init, shutdown

    results, facts = _local_checks(layout, environ, inputs, root, early)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    nccl_folder = None
    if "nccl" in backend:
        nccl_folder = Path(tempfile.mkdtemp(prefix="scaletrain-nccl-"))
        os.environ.update(nccl_debug_variables(environ, nccl_folder))
    if hosts_store:
        note_rank0(folder, environ, JOINING)
    try:
        init(
            device=facts.torch_device,
            backend=backend,
            timeout=timedelta(seconds=max(30.0, 3 * inputs.rendezvous_timeout_s)),
            # The hang watchdog watches training only: no heartbeat in ranks/, where status,
            # stacks and the watchdog would take the preflight's steps for the training's.
            environ={**environ, HANG_LIMIT: "0"},
        )
    except Exception as error:  # whatever stops the join is this rank's finding
        joined = fail(
            "join",
            f"could not join the process group: {str(error).splitlines()[0][:300]}",
            "check the other ranks' output: one of them stopped before joining",
        )
        show_rank_alone(console.notes(), who, [*results, joined])
        return 1

    writable = not any(r.failed for r in results if r.name == "run-folder")
    results += _group_checks(
        layout, inputs, root, writable, backend, nccl_folder, facts.torch_device
    )
    mine = RankReport(facts=facts, results=tuple(results))
    reports = [RankReport.from_dict(data) for data in all_gather_objects(mine.to_dict())]
    job_results = job_checks(reports, inputs.expected_gpus_per_node)
    record = preflight_record(reports, job_results)
    if layout.rank == 0:
        show_preflight(console.results(), reports, job_results, verbose=verbose)
        if folder and writable:
            write_json(folder.report / PREFLIGHT_JSON, record)
            (folder.root / SHARED_FILE).unlink(missing_ok=True)
    shutdown()
    return 0 if record["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scaletrain.diagnose.preflight",
        description="Check launcher, devices, CPU affinity, threads, network and run folder "
        "on every rank before training; exit code 1 when a check fails.",
    )
    add_input_options(parser)
    parser.add_argument("--verbose", action="store_true", help="show every check of every rank")
    options = parser.parse_args(argv)
    environ = dict(os.environ)
    try:
        inputs = read_inputs({**environ, **given_values(options)})
    except ScaletrainError as problem:
        console.error(problem.problem, problem.hint)
        return 2
    return run_preflight(environ, inputs, verbose=options.verbose)
