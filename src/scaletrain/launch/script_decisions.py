"""What a job does with your script, decided from what the script shows of itself, and said in
a few lines before the job is queued: how each process starts and what it sees, its GPUs,
its --local_rank, restarts and requeue, and what the job's Python is checked for.

Restarts and requeue pay off only for a script that continues from a checkpoint: for any
other, a crash late in training would start it again from the beginning, up to --max-restarts
times in the same allocation, and again after each requeue. So they are on by default only
where the script shows a way to resume (script_patterns.toml), and the user can force either.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError
from scaletrain.launch.environment_check import import_check
from scaletrain.planning.plan import Plan
from scaletrain.planning.request import Request
from scaletrain.planning.script_facts import ScriptFacts
from scaletrain.planning.script_launch import local_rank_option, visible_gpus

DEFAULT_MAX_RESTARTS = 3
"""Restarts of a script that resumes, when --max-restarts is not given."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """Whether a failed or stopped run starts again by itself, and why."""

    max_restarts: int
    """The launcher restarts all processes up to this often after a crash."""
    requeue: bool
    """The job goes back into the queue after a stop at a checkpoint or a hang."""
    why: str


def recovery(facts: ScriptFacts, *, max_restarts: int | None, requeue: bool | None) -> Recovery:
    """Restarts and requeue as asked, else on for scripts that resume and off for the others."""
    if max_restarts is not None and max_restarts < 0:
        raise ScaletrainError(
            f"--max-restarts {max_restarts} is negative.", "give --max-restarts 0 or more."
        )
    resumes = bool(facts.resumes)
    restarts = max_restarts if max_restarts is not None else DEFAULT_MAX_RESTARTS * resumes
    again = requeue if requeue is not None else resumes
    if resumes:
        why = f"the script resumes ({', '.join(facts.resumes)})"
    else:
        why = (
            "the script shows no way to resume (such as st.Checkpointer), so a restart would "
            "train from the start again; --max-restarts N and --requeue turn them on"
        )
    if max_restarts is not None or requeue is not None:
        why = "as asked" if not resumes else f"as asked; {why}"
    return Recovery(max_restarts=restarts, requeue=again, why=why)


def describe_decisions(
    request: Request, plan: Plan, facts: ScriptFacts, recovered: Recovery, *, checks_script: bool
) -> list[tuple[str, str]]:
    """What the job does with the script, as (what, decided and why) rows for `submit`."""
    mode = plan.launch_mode
    rows = [
        ("launch", f"{plan.mode}: {mode.description}"),
        ("each process", f"gets {', '.join(mode.script_variables)}"),
    ]
    if plan.accelerator != "cpu" or mode.own_gpu_if_script_wants:
        rows.append(("GPUs seen", visible_gpus(mode, facts, request.visible_gpus).why))
    if mode.local_rank_option:
        rows.append(("arguments", local_rank_option(mode, facts, request.local_rank_argument).why))
    restarts = (
        f"up to {recovered.max_restarts} restart(s) after a crash"
        if recovered.max_restarts
        else "no restart after a crash"
    )
    requeue = "requeued after a stop at a checkpoint" if recovered.requeue else "no requeue"
    rows.append(("recovery", f"{restarts}, {requeue}: {recovered.why}"))
    if checks_script:
        check = import_check(plan, facts, checks_script=True, runs_tools=False, instrumented=False)
        imports = f"checked when the job starts: {', '.join(check.needed)}"
        if check.perhaps_yours:
            imports += f"; {', '.join(check.perhaps_yours)} only warned about (perhaps yours)"
        rows.append(("imports", imports))
    else:
        rows.append(("imports", "not checked (--no-check)"))
    return rows
