"""One check for `plan` and `submit`: what `plan` accepts, `submit` accepts, and the reverse.

A request is planned and its job script rendered, which checks every value as it is written
(#SBATCH options, comments, profile values); its script and container image must exist where
the job will look for them, its names must be usable by Slurm, and all its text must be
writable as UTF-8. `plan` shows the result; `submit` writes it and calls sbatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scaletrain.clusters.schema import ClusterProfile
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import JobOptions, render_job_script
from scaletrain.launch.script_decisions import Recovery, recovery
from scaletrain.launch.shell_text import check_job_name
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.planning.script_facts import ScriptFacts, read_script_facts

# Container images that singularity/apptainer fetch themselves (docker://, library://, ...).
_IMAGE_URI = "://"


@dataclass(frozen=True, slots=True)
class PreparedJob:
    plan: Plan
    job_script: str
    """The sbatch script, exactly as `submit` writes it."""
    script_facts: ScriptFacts
    """What the training script showed of itself, which the plan was made from."""
    recovery: Recovery
    """Restarts and requeue, as the job script has them."""


def prepare_job(
    request: Request, profile: ClusterProfile, *, run_folder: RunFolder, options: JobOptions
) -> PreparedJob:
    """Plan the request and render its job script, or fail with what to change."""
    _check_text(request, run_folder.root.absolute(), options.workdir.absolute())
    check_job_name(run_folder.name, "run name")
    check_script(request.script, options.workdir)
    _check_container_image(request.software.container_image, options.workdir)
    facts = read_script_facts(options.workdir / request.script)
    plan = plan_job(dataclasses.replace(request, script_facts=facts), profile)
    recovered = recovery(facts, max_restarts=options.max_restarts, requeue=options.requeue)
    return PreparedJob(plan, render_job_script(plan, run_folder, options), facts, recovered)


def check_script(script: str, workdir: Path) -> None:
    """Stop before queueing a job whose script is not there (the job would fail on start)."""
    if not (workdir / script).is_file():
        raise ScaletrainError(
            f"The training script {script!r} does not exist in {workdir}.",
            "give its path relative to this folder, e.g. examples/mnist/train.py; the job runs "
            "in the folder you submit from.",
        )


def _check_container_image(image: str | None, workdir: Path) -> None:
    if image is None or _IMAGE_URI in image:
        return
    if not (workdir / image).exists():
        raise ScaletrainError(
            f"The container image {image!r} does not exist in {workdir}.",
            "give the path of the image (e.g. a .sif file) relative to this folder, or a URI "
            "that singularity pulls itself, such as docker://pytorch/pytorch.",
        )


def _check_text(request: Request, *paths: Path) -> None:
    """Every text of the request, and the paths written into the job, must be UTF-8: a name
    read from bytes that are not (Python keeps them as surrogates) cannot be written into
    plan.toml or the job script."""
    texts = [(str(path), "a folder") for path in paths] + list(_texts(request, "request"))
    for text, what in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ScaletrainError(
                    f"{text!r} ({what}) is not UTF-8 text, and job scripts are.",
                    "rename that file or folder to a UTF-8 name, or give the value as UTF-8.",
                ) from None


def _texts(value: object, name: str) -> Iterator[tuple[object, str]]:
    """Each value of the request with the name of its field, looking into the software and
    job extras (dataclasses), tuples and the environment's names and values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _texts(getattr(value, field.name), field.name)
    elif isinstance(value, tuple):
        for item in value:
            yield from _texts(item, name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key, name
            yield from _texts(item, name)
    else:
        yield value, name
