"""Can the job's Python import what the job needs? Checked in the job before any task starts,
and on the login node by `scaletrain check --cluster`, with the same small program.

The program (templates/import_check.py) runs in the job's own Python: after the module load
and the venv, or inside the container. It needs nothing but the standard library, so it
answers where scaletrain itself is missing. What it checks, in three kinds:
- needed: torch, the launcher's package, scaletrain where your script or the instrumented
  entry imports it, and the known packages your script imports: the job stops without them;
- perhaps yours: other names your script imports, which may be modules of your own that it
  finds through sys.path (as the LUMI AI guide's scripts do): a warning, never a refusal;
- scaletrain for its own checks (the preflight, the monitor, the hang watchdog): without it
  in the job's Python the job trains without them and says so.
The check searches the script's folder first, as Python does when it runs the script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from scaletrain.core.torch_support import minor, torch_support
from scaletrain.planning.plan import Plan
from scaletrain.planning.script_facts import ScriptFacts, known_packages
from scaletrain.planning.software import JobSoftware

IMPORT_CHECK = "import_check.py"
"""The check's program in templates/: give it KIND:NAME words as arguments."""
# What a hint tells pip to install: scaletrain is not on PyPI (README: Install on a cluster).
_PACKAGES = "<your copy of scaletrain> <packages>"
# The check's exit status when only scaletrain's own tools are missing (import_check.py).
TOOLS_MISSING_STATUS = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportCheck:
    """What the job's Python is asked to import, by kind (see the module's docstring)."""

    needed: tuple[str, ...] = ()
    perhaps_yours: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    search_first: str | None = None
    """The script's folder, relative to the folder the job runs in."""
    tested_torch: str | None = None
    """'A:B', the torch releases scaletrain is tested with (major.minor), when torch is needed."""

    @property
    def words(self) -> tuple[str, ...]:
        """The check's arguments: KIND:NAME words (templates/import_check.py)."""
        first = (f"path:{self.search_first}",) if self.search_first else ()
        tested = (f"tested:{self.tested_torch}",) if self.tested_torch else ()
        return (
            *first,
            *(f"need:{name}" for name in self.needed),
            *(f"maybe:{name}" for name in self.perhaps_yours),
            *(f"tool:{name}" for name in self.tools),
            *tested,
        )


def import_check(
    plan: Plan, facts: ScriptFacts, *, checks_script: bool, runs_tools: bool, instrumented: bool
) -> ImportCheck:
    """What the job's Python must import. `checks_script`: check torch, the launcher and the
    script's imports (off with --no-check); `runs_tools`: the job runs scaletrain's preflight,
    monitor or watchdog; `instrumented`: training runs through scaletrain's own entry."""
    needs_scaletrain = instrumented or (checks_script and facts.uses_scaletrain)
    needed: list[str] = ["scaletrain"] if needs_scaletrain else []
    perhaps_yours: list[str] = []
    if checks_script:
        launcher = plan.launch_mode.launcher_package
        needed += ["torch", *([launcher] if launcher else [])]
        needed += [name for name in facts.imports if name in known_packages()]
        perhaps_yours = list(facts.unknown_imports)
    folder = str(PurePath(plan.script).parent)
    support = torch_support()
    return ImportCheck(
        needed=tuple(dict.fromkeys(needed)),
        perhaps_yours=tuple(perhaps_yours),
        tools=("scaletrain",) if runs_tools and not needs_scaletrain else (),
        search_first=folder if checks_script and perhaps_yours else None,
        tested_torch=f"{minor(support.oldest)}:{minor(support.newest)}" if checks_script else None,
    )


def fix_hint(software: JobSoftware) -> str:
    """What to do when the job's Python lacks something, for this software."""
    setup = "; ".join(software.setup)
    if software.in_container:
        run = f"{software.container_command} {software.container_image}"
        if software.squashfs:
            return (
                f"rebuild {software.squashfs} from a venv with the missing packages, made inside "
                f"the container ({run} python3 -m venv --system-site-packages venv; ... "
                "pip install ...; mksquashfs venv venv.sqsh -processors 1 -no-xattrs)."
            )
        if software.venv:
            return (
                f"install them into {software.venv} inside the container: {run} bash -c "
                f"'source {software.venv}/bin/activate && pip install {_PACKAGES}'."
            )
        return (
            f"make a venv inside the container once ({setup}; {run} python3 -m venv "
            f"--system-site-packages venv; {run} venv/bin/pip install {_PACKAGES}), "
            f"then submit with --venv venv (see {software.guide})."
        )
    if software.venv:
        return (
            f"install them into {software.venv}: {setup + '; ' if setup else ''}source "
            f"{software.venv}/bin/activate; pip install {_PACKAGES}. A venv made without the "
            "module's Python (python3 -m venv --system-site-packages after the load) cannot "
            "see the module's torch."
        )
    return (
        f"make a venv over the module once: {setup + '; ' if setup else ''}python3 -m venv "
        "--system-site-packages ~/venvs/train; source ~/venvs/train/bin/activate; pip install "
        f"{_PACKAGES}; then submit from it, or give --venv ({software.guide})."
    )
