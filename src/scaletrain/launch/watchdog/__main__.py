"""The hang watchdog of a generated job, started by its batch shell beside the training step:

    python3 -u -m scaletrain.launch.watchdog --run-dir DIR --hang-limit 300 --step-pid PID \
        [--max-requeues 3 --slurm-job "$(scontrol -o show job ..)" --slurm-partition "..."]

When training hangs it writes hang.json and, with --max-requeues, what the job script does
next (hang.env: launch/watchdog/requeue.py), sends SIGTERM to the training step's srun (which
then kills the step's processes on every node at once) and exits with HANG_EXIT_STATUS.
It exits 0 when the step ends by itself or the batch shell ends it with SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from scaletrain.core.hang_report import HANG_EXIT_STATUS, HangReport, parse_hang_limit
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.watchdog.requeue import decide_requeue, read_slurm_job, write_decision
from scaletrain.launch.watchdog.watch import watch_run

# How often to check that the training step still runs.
_STEP_CHECK_S = 2.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scaletrain.launch.watchdog")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--hang-limit", required=True, help="seconds; 0: do nothing")
    parser.add_argument("--step-pid", type=int, required=True, help="the training step's srun")
    parser.add_argument("--max-requeues", type=int, help="requeue after a hang, this often at most")
    parser.add_argument("--slurm-job", default="", help="`scontrol --oneliner show job` of it")
    parser.add_argument("--slurm-partition", default="", help="and of its partition")
    options = parser.parse_args(argv)
    run = RunFolder(options.run_dir)
    job = read_slurm_job(options.slurm_job, options.slurm_partition, os.environ)
    floor = parse_hang_limit(options.hang_limit)
    if floor == 0:
        return 0
    stop = threading.Event()

    def leave(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, leave)

    def end_step(report: HangReport) -> None:
        try:
            if options.max_requeues is not None:
                decision = decide_requeue(report.blamed_nodes, job, options.max_requeues)
                write_decision(run.hang_decision, decision)
        finally:  # without hang.env the job script ends the run instead of requeueing it
            if _alive(options.step_pid):
                os.kill(options.step_pid, signal.SIGTERM)  # srun: "forcing job termination"

    def watch_step() -> None:
        while not stop.wait(_STEP_CHECK_S):
            if not _alive(options.step_pid):
                stop.set()

    threading.Thread(target=watch_step, daemon=True).start()
    report = watch_run(
        run,
        floor,
        end_step=end_step,
        say=lambda text: print(f"scaletrain watchdog: {text}", file=sys.stderr, flush=True),
        stop=stop,
    )
    return HANG_EXIT_STATUS if report is not None else 0


if __name__ == "__main__":
    sys.exit(main())
