"""Find this run's training processes on this node, from their environment (psutil).

A training process is the topmost Python process whose environment names this run folder
(SCALETRAIN_RUN_DIR) and a rank: RANK where a launcher sets it (torchrun, accelerate,
DeepSpeed jobs), else SLURM_PROCID (srun starts the processes itself). Launchers above it
(torchrun's agent, srun, the job's shell) and DataLoader workers below it are not ranks;
the workers' CPU time is counted with their rank. Processes in another UTS namespace (another
hostname: a container with its own, or the test cluster's nodes, which share one machine's
process table) belong to another node and are left to that node's sampler.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from scaletrain.core.variables import RUN_DIR


@dataclass(frozen=True, slots=True)
class _Candidate:
    rank: int
    from_launcher: bool
    """True when the rank came from RANK, False when from SLURM_PROCID."""


class RankFinder:
    """Remembers what each process is, so that every process's environment is read once."""

    def __init__(self, run_dir: str) -> None:
        self._run_dir = run_dir
        self._seen: dict[tuple[int, float], _Candidate | None] = {}
        self._own_pid = os.getpid()  # the sampler has the run's environment too
        self._node = _uts_namespace(self._own_pid)

    def find(self) -> dict[int, psutil.Process]:
        """rank -> its process, for the ranks running on this node now."""
        candidates: dict[int, tuple[psutil.Process, _Candidate]] = {}
        for process in psutil.process_iter(["pid", "create_time", "name"]):
            if process.pid == self._own_pid:
                continue
            key = (process.info["pid"], process.info["create_time"])
            if key not in self._seen:
                self._seen[key] = self._candidate(process)
            found = self._seen[key]
            if found is not None:
                candidates[process.pid] = (process, found)
        # Where any process has RANK, SLURM_PROCID belongs to the launcher above it.
        if any(found.from_launcher for _, found in candidates.values()):
            candidates = {pid: c for pid, c in candidates.items() if c[1].from_launcher}
        ranks: dict[int, psutil.Process] = {}
        for process, found in candidates.values():
            parents = {parent.pid for parent in _parents(process)}
            same_rank_above = any(
                other.rank == found.rank
                for other_pid, (_, other) in candidates.items()
                if other_pid in parents
            )
            if not same_rank_above:
                ranks[found.rank] = process
        return dict(sorted(ranks.items()))

    def _candidate(self, process: psutil.Process) -> _Candidate | None:
        with contextlib.suppress(psutil.Error):
            if "python" not in (process.info["name"] or "").lower():
                return None
            environ = process.environ()
            if environ.get(RUN_DIR) != self._run_dir:
                return None
            if _uts_namespace(process.pid) != self._node:
                return None
            if environ.get("RANK", "").isdigit():
                return _Candidate(int(environ["RANK"]), True)
            if environ.get("SLURM_PROCID", "").isdigit() and "SLURM_STEP_ID" in environ:
                return _Candidate(int(environ["SLURM_PROCID"]), False)
        return None


def _uts_namespace(pid: int) -> str | None:
    """The hostname namespace of a process (Linux), None where it cannot be read."""
    try:
        return str(Path(f"/proc/{pid}/ns/uts").readlink())
    except OSError:
        return None


def _parents(process: psutil.Process) -> list[psutil.Process]:
    try:
        return list(process.parents())
    except psutil.Error:
        return []
