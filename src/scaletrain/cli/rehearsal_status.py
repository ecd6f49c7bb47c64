"""The rehearsal's part of `scaletrain status` for a job submitted with `--rehearse`: whether
it passed, its error when it failed (and that the real job was cancelled), and its report:
step time, memory, the real job's predicted duration against its --time."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.progress_line import format_duration, last_progress_line
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.rehearsal_verdict import cancelled_by_its_rehearsal, rehearsal_verdict
from scaletrain.observe.rehearsal import (
    RehearsalReport,
    memory_line,
    predict,
    read_rehearsal_report,
    time_advice,
)
from scaletrain.planning.plan import Plan, read_plan
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import JobEvent, job_output_file
from scaletrain.slurm.output import JobInfo

Row = tuple[str, console.Piece]


def rehearsal_status(
    folder: RunFolder, job: JobEvent, real: JobInfo | None, environ: Mapping[str, str]
) -> tuple[dict[str, Any], list[Row]]:
    """The fields and rows of the rehearsal of `job`, the run's current (real) job."""
    rehearsal_id = str(job.details["rehearsal"])
    where = folder.rehearsal
    info = slurm.job_info(rehearsal_id, environ=environ)
    log = job_output_file(where, rehearsal_id)
    verdict = rehearsal_verdict(info, log)
    fields: dict[str, Any] = {
        "job_id": rehearsal_id,
        "state": info.state if info else "UNKNOWN",
        "verdict": verdict,
        "error": _error(log) if verdict == "failed" else None,
        "output": str(log) if log else None,
    }
    state = info.state_with_reason if info else "no longer known to Slurm"
    report = read_rehearsal_report(where)
    rows: list[Row] = []
    if verdict == "running":
        progress = last_progress_line(where.metrics / "train.jsonl") or "no step yet"
        rows.append(("rehearsal", (f"job {rehearsal_id} {state}: {progress}", "info")))
    elif verdict == "passed":
        rows.append(("rehearsal", (f"job {rehearsal_id} passed: {_passed(report)}", "success")))
    elif verdict == "failed":
        error = fields["error"] or "see its output"
        rows.append(("rehearsal", (f"job {rehearsal_id} failed ({state}): {error}", "error")))
        if cancelled_by_its_rehearsal(real):
            rows.append(("real job", "cancelled by Slurm before it started: its rehearsal failed"))
        rows.append(("doctor", f"scaletrain doctor {where.root}"))
    else:
        rows.append(("rehearsal", (f"job {rehearsal_id}: {state}", "warning")))
    if report is not None:
        found, report_rows = _report(folder, report)
        fields.update(found)
        rows += report_rows
    rows.append(("rehearsal log", str(log) if log else f"- (none in {where.logs}/)"))
    return fields, rows


def _passed(report: RehearsalReport | None) -> str:
    """What the passed rehearsal did: its save and resume, or trained until its end."""
    if report is None:
        return "trained without an error (no save and resume: no st.Checkpointer reached them)"
    saved = f"saved in {report.save_s:.2g} s" if report.save_s is not None else "saved"
    loaded = f"resumed in {report.load_s:.2g} s" if report.load_s is not None else "resumed"
    weights = {True: ", the same weights", False: ", other weights", None: ""}
    came_back = weights[report.weights_came_back]
    steps = report.steps
    return f"{steps} steps, a checkpoint {saved} and {loaded}{came_back}, {steps} more"


def _error(log: Path | None) -> str | None:
    """The failure the doctor finds in the rehearsal's output: the error of its last Python
    traceback, or the title of a known signature."""
    from scaletrain.diagnose.doctor import diagnose_files

    if log is None:
        return None
    findings = diagnose_files([log])
    for finding in findings:
        for detail in finding.details:
            if "error" in detail:
                return detail["error"]
    return findings[0].signature.title if findings else None


def _report(folder: RunFolder, report: RehearsalReport) -> tuple[dict[str, Any], list[Row]]:
    """Step time, memory, and the real job's predicted duration against its --time."""
    real, rehearsal = _plan(folder.plan), _plan(folder.rehearsal.plan)
    fields: dict[str, Any] = {
        "step_s": report.step_s,
        "samples_per_s": report.samples_per_s,
        "peak_memory_gb": report.peak_memory_gb,
        "device_memory_gb": rehearsal.gpu_memory_gb if rehearsal else None,
    }
    rows: list[Row] = []
    if report.step_s is not None:
        rate = f", {report.samples_per_s:,.0f} samples/s" if report.samples_per_s else ""
        timed = f"median of {report.timed_steps} steps on {report.world_size} GPU(s)"
        rows.append(("step time", f"{report.step_s:.3g} s ({timed}){rate}"))
    rows.append(("memory", memory_line(report, fields["device_memory_gb"])))
    if real is None:
        return fields, rows
    study = folder.report / "scaling.json"
    prediction = predict(report, real.world_size, study if study.is_file() else None)
    if prediction is None:
        rows.append(("predicted", "- (the rehearsal did not see the run's steps: ckpt.epochs)"))
        return fields, rows
    advice = time_advice(prediction.seconds, real.time_seconds)
    fields |= {"predicted_s": prediction.seconds, "suggestion": advice}
    rows += [
        (
            "predicted",
            f"{format_duration(prediction.seconds)} for the real job = {prediction.arithmetic} "
            f"({prediction.scaling})",
        ),
        ("suggestion", advice),
    ]
    return fields, rows


def _plan(path: Path) -> Plan | None:
    try:
        return read_plan(path)
    except ScaletrainError:
        return None
