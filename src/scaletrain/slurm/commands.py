"""The one module that runs Slurm's commands (sbatch, scontrol, sacct, scancel, ...).

Every function takes the environment the commands run with (`environ`): PATH decides which
`sbatch` runs and SLURM_CONF which cluster it talks to, so callers read os.environ once at
the edge and tests can point at their own cluster. Failures become ScaletrainError with the
command, Slurm's own message and a hint (hints in slurm_errors.toml).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path

from scaletrain.core.errors import ScaletrainError
from scaletrain.slurm.output import (
    SACCT_FIELDS,
    SACCT_RUN_FIELDS,
    AccountedRun,
    JobInfo,
    SlurmNode,
    SlurmPartition,
    job_from_sacct_line,
    job_from_scontrol,
    node_from_fields,
    parse_oneliners,
    partition_from_fields,
    run_from_sacct_line,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# A busy controller answers within seconds; a minute means it is down or unreachable.
COMMAND_TIMEOUT_S = 60
# What Slurm's commands print when the controller is down, restarting or too busy to answer:
# the same question may well get an answer a minute later.
_UNAVAILABLE_MESSAGES = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
)


class SlurmCommandError(ScaletrainError):
    """A Slurm command ran and failed; `stderr` keeps its message for callers to inspect."""

    def __init__(self, command: Sequence[str], exit_code: int, stderr: str) -> None:
        self.stderr = stderr.strip()
        message = self.stderr.splitlines()[-1] if self.stderr else "no message"
        super().__init__(
            f"`{shlex.join(command)}` failed (exit code {exit_code}): {message}",
            _hint_for(self.stderr),
        )


class SlurmUnavailableError(ScaletrainError):
    """The controller did not answer in time or could not be reached: worth asking again."""


def run_command(
    command: str,
    *args: str,
    environ: Mapping[str, str],
    cwd: Path | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
) -> str:
    """Run one Slurm command and return its stdout; every call in scaletrain comes here."""
    executable = find_command(command, environ=environ)
    try:
        result = subprocess.run(
            [executable, *args],
            env=dict(environ),
            cwd=cwd,
            capture_output=True,
            # Slurm prints names and paths as they were given, UTF-8 on any recent system,
            # whatever the locale of the login shell (LANG=C would make Python expect ASCII).
            encoding="utf-8",
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(
            f"`{shlex.join([command, *args])}` did not answer within {timeout_s:.0f} s.",
            "the Slurm controller is busy or unreachable; try again in a minute.",
        ) from None
    if result.returncode != 0:
        failure = SlurmCommandError([command, *args], result.returncode, result.stderr)
        if any(message.lower() in failure.stderr.lower() for message in _UNAVAILABLE_MESSAGES):
            raise SlurmUnavailableError(failure.problem, failure.hint)
        raise failure
    return result.stdout


def find_command(command: str, *, environ: Mapping[str, str]) -> str:
    """The path of a Slurm command, or an error saying that Slurm is not here."""
    executable = shutil.which(command, path=environ.get("PATH", ""))
    if executable is None:
        raise ScaletrainError(
            f"Slurm's {command} was not found on this machine (PATH has no {command}).",
            "run this on a login node of your cluster (or `module load slurm` first).",
        )
    # Absolute: sbatch runs from the run folder, where a relative PATH entry means another place.
    return str(Path(executable).absolute())


def submit(
    script_path: Path,
    *,
    cwd: Path,
    environ: Mapping[str, str],
    options: Sequence[str] = (),
) -> str:
    """Submit a batch script with `sbatch --parsable` and return the job id.

    Relative paths in the script (such as --output=logs/%x-%j.out) are relative to `cwd`,
    which also becomes the job's working directory. `environ` is exported to the job.
    """
    output = run_command(
        "sbatch", "--parsable", *options, str(script_path), environ=environ, cwd=cwd
    )
    # --parsable prints "<job id>" or "<job id>;<cluster>".
    job_id = output.strip().split(";")[0]
    if not job_id.isdigit():
        raise ScaletrainError(
            f"sbatch did not print a job id (it printed {output.strip()!r}).",
            "check the job with `squeue --me`; a site wrapper around sbatch may print more.",
        )
    return job_id


def job_info(job_id: str, *, environ: Mapping[str, str]) -> JobInfo | None:
    """The job's state; None when Slurm no longer knows it (ended, no accounting here)."""
    try:
        output = run_command("scontrol", "show", "job", "--oneliner", job_id, environ=environ)
    except SlurmCommandError as failure:
        if "Invalid job id" not in failure.stderr:
            raise
    else:
        # An array or heterogeneous job prints a line per part: take the one with this id.
        jobs = parse_oneliners(output)
        fields = next((f for f in jobs if f.get("JobId") == job_id), jobs[0] if jobs else None)
        if fields is not None:
            return job_from_scontrol(fields)
    # The controller forgets a job MinJobAge (default 300 s) after it ends; accounting keeps it.
    return _job_from_sacct(job_id, environ)


def _job_from_sacct(job_id: str, environ: Mapping[str, str]) -> JobInfo | None:
    try:
        output = run_command(
            "sacct",
            "--jobs",
            job_id,
            "--allocations",
            "--noheader",
            "--parsable2",
            f"--format={','.join(SACCT_FIELDS)}",
            environ=environ,
        )
    except SlurmCommandError as failure:
        if "accounting storage is disabled" in failure.stderr:
            return None
        raise
    rows = (job_from_sacct_line(line) for line in output.splitlines())
    return next((job for job in rows if job is not None and job.job_id == job_id), None)


def job_runs(job_ids: Sequence[str], *, environ: Mapping[str, str]) -> list[AccountedRun] | None:
    """Every run of these jobs that accounting knows, the first and each after a requeue,
    oldest first; None where the site keeps no accounting."""
    try:
        output = run_command(
            "sacct",
            f"--jobs={','.join(job_ids)}",
            "--duplicates",
            "--allocations",
            "--noheader",
            "--parsable2",
            f"--format={','.join(SACCT_RUN_FIELDS)}",
            # Start and End as seconds since the epoch, whatever the site's time zone.
            environ={**environ, "SLURM_TIME_FORMAT": "%s"},
        )
    except SlurmCommandError as failure:
        if "accounting storage is disabled" in failure.stderr:
            return None
        raise
    runs = [run for run in map(run_from_sacct_line, output.splitlines()) if run is not None]
    return sorted(runs, key=lambda run: (run.start is None, run.start or 0.0))


def cancel(
    job_id: str,
    *,
    environ: Mapping[str, str],
    signal: str | None = None,
    batch_only: bool = False,
) -> None:
    """End a job (scancel), or only send it `signal` (e.g. USR1), to the batch shell if asked."""
    options = [f"--signal={signal}"] if signal else []
    if batch_only:
        options.append("--batch")
    run_command("scancel", *options, job_id, environ=environ)


def requeue(job_id: str, *, environ: Mapping[str, str]) -> None:
    """Put a running job back in the queue; it restarts with SLURM_RESTART_COUNT + 1."""
    run_command("scontrol", "requeue", job_id, environ=environ)


# Runs on each node of a job (srun): signal the listed processes of that node, each only if
# it is still the same process (its start time in /proc/<pid>/stat, field 22, matches).
_SIGNAL_ON_NODE = r"""
signal=$1; shift
for entry in "$@"; do
    IFS=: read -r host pid start <<<"$entry"
    [[ $host == "$SLURMD_NODENAME" ]] || continue
    { stat=$(<"/proc/$pid/stat"); } 2>/dev/null || continue
    read -r -a fields <<<"${stat##*) }"
    [[ ${fields[19]} == "$start" ]] && kill -s "$signal" "$pid"
done
exit 0
"""


def signal_processes(
    job_id: str,
    processes: Mapping[str, Sequence[tuple[int, int]]],
    signal: str,
    *,
    environ: Mapping[str, str],
) -> None:
    """Send `signal` (e.g. USR2) to processes of a running job on its nodes: node -> (pid,
    start time in clock ticks). One `srun --overlap` step runs a few lines of bash on every
    node, beside the job's own steps."""
    entries = [f"{node}:{pid}:{start}" for node, pids in processes.items() for pid, start in pids]
    run_command(
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        f"--nodelist={','.join(processes)}",
        f"--nodes={len(processes)}",
        "--ntasks-per-node=1",
        "--cpus-per-task=1",
        "bash",
        "-c",
        _SIGNAL_ON_NODE,
        "signal",
        signal,
        *entries,
        environ=environ,
    )


def hostnames(nodelist: str, *, environ: Mapping[str, str]) -> list[str]:
    """Expand a compressed host list (nid[001-003]) the way the site's Slurm does."""
    output = run_command("scontrol", "show", "hostnames", nodelist, environ=environ)
    return output.split()


def cluster_name(*, environ: Mapping[str, str]) -> str:
    """The site's ClusterName from `scontrol show config`."""
    for line in run_command("scontrol", "show", "config", environ=environ).splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    raise ScaletrainError(
        "`scontrol show config` names no ClusterName.",
        "pass a name for the profile with --name.",
    )


def partitions(*, environ: Mapping[str, str]) -> list[SlurmPartition]:
    """Every partition this user can see."""
    output = run_command("scontrol", "show", "partition", "--oneliner", environ=environ)
    return [partition_from_fields(fields) for fields in parse_oneliners(output)]


def nodes(*, environ: Mapping[str, str], names: str = "") -> list[SlurmNode]:
    """Every node of the cluster, or those of a host list such as n[1-2]."""
    output = run_command(
        "scontrol", "show", "node", "--oneliner", *([names] if names else []), environ=environ
    )
    return [node_from_fields(fields) for fields in parse_oneliners(output)]


@cache
def _hints() -> tuple[tuple[str, str], ...]:
    text = resources.files("scaletrain.slurm").joinpath("errors.toml").read_text(encoding="utf-8")
    return tuple((entry["message"], entry["hint"]) for entry in tomllib.loads(text)["error"])


def _hint_for(stderr: str) -> str:
    """The hint for the first known message in Slurm's stderr, else a general one."""
    for message, hint in _hints():
        if message.lower() in stderr.lower():
            return hint
    return (
        "the message comes from Slurm itself; check the job's options, or send the whole "
        "message to your site's support."
    )
