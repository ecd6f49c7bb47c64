"""Follow a job's Slurm output file while the job runs (`scaletrain logs --follow`).

The loop ends by itself when Slurm says the job ended (or no longer knows it). A requeued job
keeps its id and output file name; a file that shrank was rewritten from the start by the
rerun (no --open-mode=append), so reading starts over.

Slurm is asked for the job's state in a thread of its own, so that a busy controller (one
`scontrol` taking a minute) or one that is briefly down holds up neither the output nor the
end: following says so, asks again, and goes on until the job ends or the user stops it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from scaletrain.core.files import FileTail
from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import job_output_file
from scaletrain.slurm.output import JobInfo

# New output shows within this many seconds; asking Slurm for the state is rarer (controller load).
_READ_INTERVAL_S = 0.5
_STATE_INTERVAL_S = 2.0
# A controller answers within a second or two; this long without an answer is worth a word.
_SLOW_AFTER_S = 10.0
# After Slurm could not answer: ask again after this long (scontrol itself retries for a while).
_RETRY_AFTER_S = 5.0


class _StateQuestion:
    """One question to Slurm about the job (scontrol, then sacct), answered in a daemon
    thread: Ctrl-C ends following at once, even while Slurm is still thinking."""

    def __init__(self, job_id: str, environ: Mapping[str, str]) -> None:
        self.asked = time.monotonic()
        self.answer: JobInfo | None = None
        self.failure: Exception | None = None
        self._answered = threading.Event()
        thread = threading.Thread(
            target=self._ask, args=(job_id, environ), name="scaletrain-job-state", daemon=True
        )
        thread.start()

    def _ask(self, job_id: str, environ: Mapping[str, str]) -> None:
        try:
            self.answer = slurm.job_info(job_id, environ=environ)
        except Exception as failure:  # handed to the following loop, which decides
            self.failure = failure
        finally:
            self._answered.set()

    @property
    def answered(self) -> bool:
        return self._answered.is_set()


def follow_job_output(
    folder: RunFolder,
    job_id: str,
    *,
    environ: Mapping[str, str],
    write: Callable[[str], None],
    on_waiting: Callable[[JobInfo], None],
    on_quiet: Callable[[float], None] = lambda _seconds: None,
    on_slow: Callable[[str], None] = lambda _why: None,
    on_answer_again: Callable[[], None] = lambda: None,
) -> JobInfo | None:
    """Pass new output of the job to `write` until the job ends; return its final state.

    `on_waiting` is told once per state while the job has no output file yet (PENDING...);
    `on_quiet` every few seconds while it runs, how long ago its last output came; `on_slow`
    why Slurm gave no answer (once per reason until it answers again: `on_answer_again`).
    """
    reader = FileTail()
    question: _StateQuestion | None = _StateQuestion(job_id, environ)
    next_question = 0.0
    info: JobInfo | None = None
    last_waiting_state = slow_reason = ""
    last_output = time.monotonic()
    while True:
        output_file = job_output_file(folder, job_id)
        if text := reader.new_text(output_file):
            write(text)
            last_output = time.monotonic()
        now = time.monotonic()
        if question is None and now >= next_question:
            question = _StateQuestion(job_id, environ)
        elif question is not None and question.answered:
            if question.failure is None:
                info = question.answer
                if info is None or not info.is_active:
                    break
                if slow_reason:
                    on_answer_again()
                    slow_reason = ""
                if info.state == "RUNNING":
                    on_quiet(now - last_output)
                question, next_question = None, now + _STATE_INTERVAL_S
            elif isinstance(question.failure, slurm.SlurmUnavailableError):
                why = question.failure.problem.rstrip(".")
                slow_reason = _say_once(on_slow, why, slow_reason)
                question, next_question = None, now + _RETRY_AFTER_S
            else:
                raise question.failure
        elif question is not None and now - question.asked >= _SLOW_AFTER_S:
            why = f"no answer from Slurm about job {job_id} for {_SLOW_AFTER_S:.0f} s"
            slow_reason = _say_once(on_slow, why, slow_reason)
        if info is not None and output_file is None and info.state != last_waiting_state:
            on_waiting(info)
            last_waiting_state = info.state
        time.sleep(_READ_INTERVAL_S)
    # Slurm writes the last lines before it marks the job ended: read them now.
    if text := reader.new_text(job_output_file(folder, job_id)):
        write(text)
    return info


def _say_once(on_slow: Callable[[str], None], why: str, said: str) -> str:
    """Tell `why` unless it was the last thing told; return what was told last."""
    if why != said:
        on_slow(why)
    return why
