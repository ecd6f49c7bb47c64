"""Submit a prepared job for a run: check the run folder, save plan and script, call sbatch.

A run name is a run: submitting the same name again continues it (its checkpoints resume),
as long as the plan is the same and no job of it is still queued or running. A submission
that sbatch refuses leaves the run folder as it was, so the corrected command just works.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_programs import JOB_PROGRAMS, write_job_programs
from scaletrain.launch.prepare import PreparedJob
from scaletrain.planning.plan import Plan, read_plan, write_plan
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import current_job, read_job_events, record_job_event

# Plan fields that follow from the others: shown only when nothing else differs.
_DERIVED = frozenset(
    {
        "partition_reason",
        "time_seconds",
        "billing",
        "warnings",
        "cpu_masks",
        "exclusive",
    }
)


def plan_changes(saved: Plan, new: Plan) -> list[str]:
    """What differs, as `field: saved → new`; fields that follow from others only if nothing
    else differs (a changed profile)."""
    changed = [
        field.name
        for field in dataclasses.fields(Plan)
        if getattr(saved, field.name) != getattr(new, field.name)
    ]
    chosen = [name for name in changed if name not in _DERIVED] or changed
    return [f"{name}: {getattr(saved, name)} → {getattr(new, name)}" for name in chosen]


def check_continuation(folder: RunFolder, plan: Plan, environ: Mapping[str, str]) -> None:
    """An existing run may be continued only with the same plan and with no job still alive."""
    folder.check_can_create()
    if folder.plan.exists():
        changed = plan_changes(read_plan(folder.plan), plan)
        if changed:
            raise ScaletrainError(
                f"Run {folder.name!r} exists with a different plan ({'; '.join(changed)}; "
                f"saved in {folder.plan}).",
                "give the same options to continue that run, or another --name for a new run.",
            )
    check_no_live_job(folder, environ)


def check_no_live_job(folder: RunFolder, environ: Mapping[str, str]) -> None:
    """A run folder takes a new job only when its current one has ended."""
    job = current_job(read_job_events(folder))
    if job is not None:
        info = slurm.job_info(job.job_id, environ=environ)
        if info is not None and info.is_active:
            raise ScaletrainError(
                f"Run {folder.name!r} still has job {job.job_id} ({info.state_with_reason}); "
                "a second job would write into the same run folder.",
                f"wait for it (scaletrain logs -f {folder.name}) or cancel it first "
                f"(scaletrain cancel {folder.name}).",
            )


def submit_job(
    prepared: PreparedJob,
    folder: RunFolder,
    environ: Mapping[str, str],
    *,
    after_rehearsal: str | None = None,
) -> str:
    """Save plan.toml, job.sbatch (exactly as submitted) and the programs it runs, sbatch it,
    record it; the job id.

    `after_rehearsal`: the job id of its rehearsal, which the job waits for and must pass
    (sbatch options, not #SBATCH lines: a resubmission of job.sbatch waits for nothing)."""
    slurm.find_command("sbatch", environ=environ)  # before writing anything
    plan = prepared.plan
    options = (
        (f"--dependency=afterok:{after_rehearsal}", "--kill-on-invalid-dep=yes")
        if after_rehearsal
        else ()
    )
    with _undone_on_failure(folder):
        folder.create()
        write_plan(plan, folder.plan)
        folder.job_script.write_text(prepared.job_script, encoding="utf-8")
        write_job_programs(folder.programs)
        # From the run folder: the script's #SBATCH --output=logs/... is relative to it.
        job_id = slurm.submit(
            folder.job_script.absolute(), cwd=folder.root, environ=environ, options=options
        )
    # The rehearsal it waits for, if any: `status` shows it with the job.
    rehearsal: dict[str, Any] = {"rehearsal": after_rehearsal} if after_rehearsal else {}
    record_job_event(
        folder,
        "submitted",
        job_id,
        cluster=plan.cluster,
        mode=plan.mode,
        nodes=plan.nodes,
        gpus=plan.world_size,
        # Only a script that uses scaletrain reports its steps (status: "no steps reported").
        uses_scaletrain=prepared.script_facts.uses_scaletrain,
        **rehearsal,
    )
    return job_id


@contextlib.contextmanager
def _undone_on_failure(folder: RunFolder) -> Iterator[None]:
    """If the body fails (sbatch refused the job), put back what it found: the files it wrote
    get their old content or go, the folders it made go; nothing else is touched."""
    programs = (folder.programs / name for name in JOB_PROGRAMS)
    files = (folder.plan, folder.job_script, *programs)
    saved = {path: path.read_bytes() if path.is_file() else None for path in files}
    folders = (folder.root, folder.logs, folder.metrics, folder.programs)
    made = [path for path in folders if not path.exists()]
    try:
        yield
    except BaseException:
        for path, content in saved.items():
            with contextlib.suppress(OSError):
                if content is None:
                    path.unlink(missing_ok=True)
                else:
                    path.write_bytes(content)
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()  # only if empty: never anything the user put there meanwhile
        raise
