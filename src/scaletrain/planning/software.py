"""The job's software: which of the site's stacks gives it PyTorch, and how your own packages
(a venv, or a venv packed as squashfs) go on top, inside a container where the stack has one.

A venv over a module is activated in the batch script after the module load; its python
then starts every task. Inside a container, the venv (or the squashfs image mounted at
/user-software) comes first on the container's PATH, as LUMI's AI guide does it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from scaletrain.clusters.schema import ClusterProfile, Stack
from scaletrain.core.errors import ScaletrainError

NO_VENV = "none"
"""`--venv none`: no venv, the stack's own Python."""
SQUASHFS_MOUNT = "/user-software"
"""Where a squashfs venv appears inside the container (LUMI AI guide, chapter 02)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SoftwareChoice:
    """What the user asked for; None means "the profile's default"."""

    stack: str | None = None
    container_image: str | None = None
    venv: str | None = None
    """A venv folder, NO_VENV, or None: the venv `scaletrain submit` runs from (module stacks)."""
    submitting_venv: str | None = None
    """The venv scaletrain itself runs from (VIRTUAL_ENV or sys.prefix), if any."""
    squashfs: str | None = None
    binds: tuple[str, ...] = ()
    setup: tuple[str, ...] | None = None
    """Lines that replace the stack's setup lines (your own `module load`)."""


def submitting_venv(environ: Mapping[str, str]) -> str | None:
    """The venv this command runs from: an activated one (VIRTUAL_ENV), else the one whose
    python runs scaletrain (e.g. `~/venvs/train/bin/scaletrain` without activating it)."""
    if environ.get("VIRTUAL_ENV"):
        return environ["VIRTUAL_ENV"]
    return sys.prefix if sys.prefix != sys.base_prefix else None


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSoftware:
    """The job's software, decided: what the job script writes before any task starts."""

    stack: str | None = None
    description: str = ""
    setup: tuple[str, ...] = ()
    container_image: str | None = None
    container_command: str | None = None
    binds: tuple[str, ...] = ()
    """Binds beyond the stack's setup (the job adds its folders itself)."""
    venv: str | None = None
    squashfs: str | None = None
    task_setup: tuple[str, ...] = ()
    guide: str = ""
    """The page of the docs on adding packages at this site (the profile's software.guide)."""

    @property
    def in_container(self) -> bool:
        return self.container_image is not None

    @property
    def python_bin(self) -> str | None:
        """The folder whose python3 runs the tasks, when it is your venv's."""
        if self.squashfs:
            return f"{SQUASHFS_MOUNT}/bin"
        return f"{self.venv}/bin" if self.venv else None


def choose_software(choice: SoftwareChoice, profile: ClusterProfile) -> JobSoftware:
    """The stack asked for (or the default, or a container stack for --container), with your
    venv on top; errors name the option that cannot work on this cluster."""
    name, stack = _stack(choice, profile)
    image = choice.container_image or stack.image
    if choice.container_image and not stack.is_container:
        raise ScaletrainError(
            f"--container needs a stack that runs containers, and {profile.name}'s stack "
            f"{name!r} does not.",
            "add a stack with container_command (e.g. 'apptainer exec') to the profile, or "
            "leave out --container.",
        )
    if (choice.squashfs or choice.binds) and image is None:
        option = "--squashfs" if choice.squashfs else "--bind"
        raise ScaletrainError(
            f"{option} mounts into a container, but the job runs without one (stack {name!r}).",
            "add --container IMAGE (or a stack with an image), or use --venv for a venv over a "
            "module.",
        )
    if choice.squashfs and choice.venv not in (None, NO_VENV):
        raise ScaletrainError(
            "--squashfs and --venv both name your packages.",
            "give one: --squashfs venv.sqsh (the venv packed with mksquashfs) or --venv FOLDER.",
        )
    return JobSoftware(
        stack=name,
        description=stack.description,
        setup=choice.setup if choice.setup is not None else stack.setup,
        container_image=image,
        container_command=stack.container_command if image else None,
        binds=(*stack.binds, *choice.binds),
        venv=_venv(choice, image is not None),
        squashfs=choice.squashfs,
        task_setup=profile.software.task_setup,
        guide=profile.software.guide,
    )


def _stack(choice: SoftwareChoice, profile: ClusterProfile) -> tuple[str | None, Stack]:
    stacks, default = profile.software.stacks, profile.software.default
    if choice.stack is not None:
        if choice.stack not in stacks:
            known = ", ".join(stacks) or "none"
            raise ScaletrainError(
                f"{profile.name} has no software stack called {choice.stack!r} (known: {known}).",
                f"use one of them, or see `scaletrain clusters show {profile.name}`.",
            )
        return choice.stack, stacks[choice.stack]
    if choice.container_image and default is not None and not stacks[default].is_container:
        # --container alone picks the site's container stack, with its bindings module.
        for name, stack in stacks.items():
            if stack.is_container:
                return name, stack
    if default is None:
        return None, Stack()
    return default, stacks[default]


def _venv(choice: SoftwareChoice, in_container: bool) -> str | None:
    """The venv to activate: as asked; else, outside containers, the one submit runs from (a
    venv made on the login node cannot run inside a container image)."""
    if choice.venv == NO_VENV:
        return None
    if choice.venv is not None:
        return choice.venv
    return None if in_container else choice.submitting_venv
