"""A Plan becomes an sbatch script: templates/<mode>.sbatch.j2 inside templates/job.sbatch.j2.

The skeleton (job.sbatch.j2) writes what every job has: #SBATCH lines (all of them from
`sbatch_lines` here), software (modules or a container), exported variables, the preflight
check, training in the background with the graceful-stop trap, and the requeue. The launch
mode's template writes its launch line. What is the same in every job (the requeues' commands,
the check of the job's Python, the rendezvous store) is not in the script: it runs those
programs from the run folder, where `submit` writes them (job_programs.py). Every value is
shell-quoted as it is written (see shell_text.py); only template code is not.
"""

from __future__ import annotations

import dataclasses
import shlex
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from scaletrain import __version__
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core import in_job_modules, variables
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.hang_report import DEFAULT_HANG_LIMIT_S, HANG_EXIT_STATUS
from scaletrain.core.job_port import JOB_PORT_BASE, JOB_PORT_SPAN
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.environment_check import TOOLS_MISSING_STATUS, fix_hint, import_check
from scaletrain.launch.job_programs import JOB_PROGRAMS
from scaletrain.launch.script_decisions import recovery
from scaletrain.launch.shell_text import (
    check_job_name,
    expandable,
    finalize,
    one_line,
    sbatch_option,
    shell_code,
    shell_quote,
    shell_words,
)
from scaletrain.launch.template_cache import TemplateCache
from scaletrain.planning.modes import LaunchMode
from scaletrain.planning.plan import Plan
from scaletrain.planning.script_facts import read_script_facts
from scaletrain.planning.software import SQUASHFS_MOUNT, JobSoftware

# Comment lines of job scripts stay within 96 columns with their `# `.
_COMMENT_WIDTH = 94
# Time to save a checkpoint before the time limit; Slurm may signal up to a minute early.
_DEFAULT_STOP_MARGIN_S = 300
# torchrun binds each process to its GPU's NUMA node from this torch on (--numa-binding).
NUMA_BINDING_TORCH = (2, 9)
# sbatch options that name files (relative to where sbatch runs: the run folder).
_FILE_OPTIONS = ("--output=", "--error=", "--input=")
# A rehearsal's training that outlives its end gets SIGTERM, then SIGKILL this much later
# (`timeout --kill-after`): well within any stop margin.
REHEARSAL_KILL_AFTER_S = 30
# `timeout`'s exit status when the time was up: the rehearsal trained until its end.
TIMED_OUT_STATUS = 124


@dataclass(frozen=True, kw_only=True, slots=True)
class JobOptions:
    """Choices about a job beyond its resources (the Plan)."""

    workdir: Path
    """Where the job runs your command: the folder `scaletrain submit` ran in."""
    requeue: bool | None = None
    """Requeue the job after a graceful stop (time limit near, preemption) or a hang; None:
    if the script resumes (launch/script_decisions.py)."""
    max_requeues: int = 3
    """Requeue only while SLURM_RESTART_COUNT is below this."""
    stop_margin_s: int | None = None
    """Seconds before the time limit at which Slurm asks the job to stop (USR1); None:
    5 minutes, or a fifth of the time limit for jobs shorter than 25 minutes."""
    max_restarts: int | None = None
    """torchrun/accelerate restart all processes of a node group this often after a crash;
    None: 3 if the script resumes, else 0 (launch/script_decisions.py)."""
    preflight: bool = True
    """Run the preflight check on every rank before training."""
    monitor_interval_s: float | None = 2.0
    """Seconds between GPU/CPU samples of each node's sampler; None: no sampler."""
    instrument: tuple[tuple[str, str], ...] = ()
    """Variables of scaletrain's instrumented entry (a profile, a step limit); when given,
    training runs through it and the job exports them."""
    hang_limit_s: float = DEFAULT_HANG_LIMIT_S
    """End the training step when no rank finishes a step for this long (or 20 median steps,
    if longer) and requeue without the blamed nodes; 0: no hang watchdog."""
    template_cache: Path | None = None
    """Where the compiled templates are kept between commands (launch/template_cache.py);
    None: compiled at every start."""
    rehearsal_steps: int | None = None
    """This job is a rehearsal (`submit --rehearse`, templates/rehearsal.j2): a script with
    st.Checkpointer trains this many steps, saves, resumes from that checkpoint, trains as
    many more and stops; any script trains at most until the stop margin. None: a real job."""

    def __post_init__(self) -> None:
        if self.rehearsal_steps is not None and self.rehearsal_steps < 1:
            raise ScaletrainError(
                f"--rehearsal-steps {self.rehearsal_steps} is not a positive number.",
                "give --rehearsal-steps 1 or more (default 10).",
            )
        for option, value in (
            ("--max-requeues", self.max_requeues),
            ("--stop-margin", self.stop_margin_s or 0),
            ("--max-restarts", self.max_restarts or 0),
            ("--hang-limit", self.hang_limit_s),
        ):
            if value < 0:
                raise ScaletrainError(f"{option} {value} is negative.", f"give {option} 0 or more.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """What the launcher starts in each process: a script and its arguments, or a module."""

    script: str | None = None
    args: tuple[str, ...] = ()
    module: str | None = None


@dataclass(frozen=True, slots=True)
class SbatchLine:
    """One `#SBATCH` option of a job script, and why it is there (a comment above it)."""

    option: str
    why: str = ""

    @property
    def comment_lines(self) -> list[str]:
        """`why` in lines that fit the script's width with their `# `."""
        return textwrap.wrap(self.why, width=_COMMENT_WIDTH)


def resource_options(plan: Plan) -> tuple[str, ...]:
    """The plan's resources as sbatch options, in the order the sites' examples use."""
    options = [
        f"--partition={plan.partition}",
        f"--nodes={plan.nodes}",
        f"--ntasks-per-node={plan.tasks_per_node}",
        f"--cpus-per-task={plan.cpus_per_task}",
    ]
    if plan.gpu_request is not None and plan.accelerator != "cpu":
        options.append(plan.gpu_request.format(gpus=plan.gpus_per_node))
    if plan.memory_gb_per_node is not None:
        options.append(f"--mem={plan.memory_gb_per_node}G")  # per node (001: "--mem is per node")
    options.append(f"--time={format_slurm_time(plan.time_seconds)}")
    if plan.exclusive:
        options.append("--exclusive")
    if plan.account is not None:
        options.append(f"--account={plan.account}")
    return tuple(options)


def sbatch_lines(
    plan: Plan, *, job_name: str, logs: str, stop_margin_s: int, requeue: bool, workdir: Path
) -> list[SbatchLine]:
    """Every `#SBATCH` line of a job script, in order: the one place that writes them."""
    lines = [SbatchLine(f"--job-name={job_name}")]
    lines += [SbatchLine(option) for option in resource_options(plan)]
    lines += [
        SbatchLine(
            f"--output={logs}/%x-%j.out",
            "Output and errors of this script and of every task (%x = job name, %j = job id).",
        ),
        SbatchLine(
            "--open-mode=append",
            "Append, so that a requeued run continues its log instead of overwriting it.",
        ),
        SbatchLine(
            f"--signal=B:USR1@{stop_margin_s}",
            f'USR1 to this batch shell only ("B:") {stop_margin_s} s before the time limit: '
            "time to save a checkpoint. Training processes (and NCCL in them) are not "
            "interrupted by it.",
        ),
    ]
    if requeue:
        lines.append(
            SbatchLine(
                "--requeue",
                "The job may go back into the queue: after a graceful stop (below), or after a "
                "node failure.",
            )
        )
    for index, option in enumerate(plan.extras.sbatch):
        yours = "Yours (--sbatch)." if index == 0 else ""
        lines.append(SbatchLine(_from_folder(option, workdir), yours))
    return lines


def _from_folder(option: str, workdir: Path) -> str:
    """A file option with a relative path, made absolute from the folder you submitted from:
    sbatch would read it from the run folder, where it runs."""
    for prefix in _FILE_OPTIONS:
        path = option.removeprefix(prefix)
        if path != option and path and not Path(path).is_absolute():
            return prefix + str(workdir / path)
    return option


def render_job_script(plan: Plan, run_folder: RunFolder, options: JobOptions) -> str:
    """The job script for `plan`, writing into `run_folder`; submit it from that folder."""
    context = _context(plan, run_folder, options)
    return _templates(options.template_cache).get_template("job.sbatch.j2").render(context)


def render_environment_check(plan: Plan, workdir: Path, folder: RunFolder) -> str:
    """A bash script that sets up the job's software as its job would (modules, venv, or the
    container) and checks that the job's Python imports what the job needs: run it on a login
    node (`scaletrain check --cluster`) to know before submitting. It runs the check's program
    from `folder`'s programs/ (launch/job_programs.py writes it)."""
    context = _context(plan, folder, JobOptions(workdir=workdir))
    return _templates(None).get_template("environment_check.sh.j2").render(context)


def _context(plan: Plan, run_folder: RunFolder, options: JobOptions) -> dict[str, Any]:
    """Everything the templates read, for a job of `plan` in `run_folder`."""
    mode = plan.launch_mode
    job_name = check_job_name(plan.job_name or run_folder.name)
    run_dir, workdir = run_folder.root.absolute(), options.workdir.absolute()
    facts = read_script_facts(workdir / plan.script)
    recovered = recovery(facts, max_restarts=options.max_restarts, requeue=options.requeue)
    options = dataclasses.replace(
        options, max_restarts=recovered.max_restarts, requeue=recovered.requeue
    )
    software = plan.software
    binds = _binds(software, workdir, run_dir)
    margin = stop_margin(plan, options)
    return {
        "plan": plan,
        "options": options,
        "sbatch_lines": sbatch_lines(
            plan,
            job_name=job_name,
            logs=run_folder.logs.name,
            stop_margin_s=margin,
            requeue=recovered.requeue,
            workdir=workdir,
        ),
        "version": __version__,
        "job_name": job_name,
        "per_gpu": mode.tasks_per_node == "per-gpu",
        "run_dir": str(run_dir),
        "workdir": str(workdir),
        # What a container must see: your folder, and the run folder if it lies elsewhere.
        "binds": [str(folder) for folder in binds],
        "run_files": {
            "logs": run_folder.logs.name,
            "stop_request": run_folder.stop_request.name,
            "stopped_marker": run_folder.stopped_marker.name,
            "jobs_log": run_folder.jobs_log.name,
            "job_script": run_folder.job_script.name,
            "ranks": run_folder.ranks.name,
            "hang_report": run_folder.hang_report.name,
            "hang_decision": run_folder.hang_decision.name,
            "rehearsal_report": str(run_folder.rehearsal_report.relative_to(run_folder.root)),
        },
        # The programs the script runs (launch/job_programs.py), relative to the run folder.
        "programs": {
            Path(name).stem: f"{run_folder.programs.name}/{name}" for name in JOB_PROGRAMS
        },
        "hang_limit": f"{options.hang_limit_s:g}",
        "hang_exit_status": HANG_EXIT_STATUS,
        "watchdog_module": in_job_modules.WATCHDOG,
        "requeue_count_variable": variables.REQUEUE_COUNT,
        "run_dir_variable": variables.RUN_DIR,
        "software": software,
        "container_words": shlex.split(software.container_command or ""),
        "runtime": _runtime_prefix(software),
        "environment": _environment(plan, mode, options),
        "expand": set(plan.expand),
        "extras": plan.extras,
        "import_check": {
            "check": import_check(
                plan,
                facts,
                checks_script=options.preflight,
                runs_tools=_runs_tools(options),
                instrumented=bool(options.instrument),
            ),
            "tools_missing_status": TOOLS_MISSING_STATUS,
            "hint": fix_hint(software),
        },
        "numa_binding": mode.name == "torchrun" and bool(plan.cpu_masks),
        "numa_torch": ".".join(str(part) for part in NUMA_BINDING_TORCH),
        "port": {"base": JOB_PORT_BASE, "span": JOB_PORT_SPAN},
        "preflight_environment": _preflight_environment(plan, mode),
        "preflight_target": Target(module=in_job_modules.PREFLIGHT),
        "training_target": _training_target(plan, options),
        "monitor": _monitor(options),
        "rehearsal": _rehearsal(plan, options, margin),
        "why": variables.reason,
    }


def stop_margin(plan: Plan, options: JobOptions) -> int:
    """Seconds before the time limit to stop at: as asked, else 5 min (a fifth of short jobs)."""
    if options.stop_margin_s is None:
        return min(_DEFAULT_STOP_MARGIN_S, plan.time_seconds // 5)
    if options.stop_margin_s >= plan.time_seconds:
        raise ScaletrainError(
            f"--stop-margin {options.stop_margin_s} s is not shorter than the time limit "
            f"{format_slurm_time(plan.time_seconds)} ({plan.time_seconds} s): the job would be "
            "asked to stop at once.",
            "give a margin that leaves time to train, or leave it out (5 minutes, or a fifth of "
            "a short time limit).",
        )
    return options.stop_margin_s


def _binds(software: JobSoftware, workdir: Path, run_dir: Path) -> list[str]:
    """What a container must see beyond its bindings module: your folder, the run folder and
    the venv if they lie elsewhere, the squashfs venv at /user-software, the stack's binds."""
    if not software.in_container:
        return []
    folders = [workdir]
    for folder in (run_dir, Path(software.venv) if software.venv else None):
        if folder is not None and not any(folder.is_relative_to(seen) for seen in folders):
            folders.append(folder)
    if software.squashfs:
        folders.append(Path(software.squashfs))
    for folder in folders:
        if "," in str(folder) or ":" in str(folder):
            raise ScaletrainError(
                f"The folder {str(folder)!r} cannot be bound into a container: singularity "
                "reads ',' and ':' in it as separators.",
                "work in a folder whose path has no ',' or ':', or put --runs-dir there.",
            )
    binds = [str(folder) for folder in folders]
    if software.squashfs:
        binds[-1] += f":{SQUASHFS_MOUNT}:image-src=/"
    return [*binds, *software.binds]


def _runtime_prefix(software: JobSoftware) -> str:
    """SINGULARITY or APPTAINER: the prefix of the variables the container command reads."""
    command = software.container_command or ""
    return "APPTAINER" if "apptainer" in command else "SINGULARITY"


def _environment(plan: Plan, mode: LaunchMode, options: JobOptions) -> list[tuple[str, str]]:
    """Variables exported with their values: the plan's, the mode's own, the watchdog's limit
    (the ranks pace their heartbeats by it), then those of scaletrain's instrumented entry."""
    added = mode.environment(
        on_cpus=plan.accelerator == "cpu", max_restarts=options.max_restarts or 0
    )
    if plan.cpu_masks and mode.tasks_per_node == "one":
        # One task holds the node's cores: st.init() binds each process to its GPU's cores
        # where torchrun did not (no --numa-binding in this torch, or accelerate).
        added[variables.CPU_MASKS] = ",".join(plan.cpu_masks)
    watchdog = {variables.HANG_LIMIT: f"{options.hang_limit_s:g}"}
    return list((dict(plan.environment) | added | watchdog | dict(options.instrument)).items())


def _runs_tools(options: JobOptions) -> bool:
    """The job starts scaletrain's own checks beside your script: the preflight, the hang
    watchdog or the monitor's sampler. Without scaletrain in the job's Python it leaves them out."""
    return options.preflight or bool(options.hang_limit_s) or bool(options.monitor_interval_s)


def _training_target(plan: Plan, options: JobOptions) -> Target:
    """The script, or the script through the instrumented entry (profile, step limit)."""
    if options.instrument:
        return Target(module=in_job_modules.INSTRUMENT, args=(plan.script, *plan.script_args))
    return Target(script=plan.script, args=plan.script_args)


def _rehearsal(plan: Plan, options: JobOptions, margin: int) -> dict[str, Any] | None:
    """What a rehearsal's part of the job reads (templates/rehearsal.j2), or None."""
    if options.rehearsal_steps is None:
        return None
    return {
        "steps": options.rehearsal_steps,
        "steps_variable": variables.REHEARSAL_STEPS,
        "started_variable": variables.JOB_STARTED,
        # Training ends by the stop margin at the latest: the job's own end, not Slurm's kill
        # at the time limit (a failure), decides whether the real job starts.
        "end_s": plan.time_seconds - margin,
        "kill_after_s": REHEARSAL_KILL_AFTER_S,
        "timed_out_status": TIMED_OUT_STATUS,
    }


def _monitor(options: JobOptions) -> dict[str, str] | None:
    """The sampler each node's first task starts, or None without monitoring."""
    if not options.monitor_interval_s:
        return None
    return {
        "variable": variables.MONITOR_INTERVAL,
        "interval": f"{options.monitor_interval_s:g}",
        "module": in_job_modules.SAMPLER,
    }


def _preflight_environment(plan: Plan, mode: LaunchMode) -> list[tuple[str, str]]:
    """What the preflight check must expect, in the variables it reads."""
    gpus = 0 if plan.accelerator == "cpu" else plan.gpus_per_node
    exported = [(variables.EXPECTED_GPUS_PER_NODE, str(gpus))]
    # Masks are only bound where srun starts one task per GPU (see common.j2).
    if plan.cpu_masks and mode.tasks_per_node == "per-gpu":
        exported.append((variables.EXPECTED_CPU_MASKS, ",".join(plan.cpu_masks)))
    if mode.script_variables:
        exported.append((variables.SCRIPT_VARIABLES, ",".join(mode.script_variables)))
    return exported


@cache
def _templates(cache_folder: Path | None) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("scaletrain.launch", "templates"),
        bytecode_cache=TemplateCache(cache_folder) if cache_folder else None,
        autoescape=False,  # shell, not HTML: finalize quotes values instead
        finalize=finalize,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the render, not the job
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        shell_quote=shell_quote,
        shell_words=shell_words,
        shell_code=shell_code,
        sbatch_option=sbatch_option,
        one_line=one_line,
        expandable=expandable,
    )
    return environment
