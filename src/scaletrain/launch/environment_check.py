"""Can the job's Python import what the job needs? Checked in the job before any task starts,
and on the login node by `scaletrain check --cluster`, with the same small program.

The program (templates/import_check.py) runs in the job's own Python: after the module load
and the venv, or inside the container. It needs nothing but the standard library, so it
answers where scaletrain itself is missing. What it checks: scaletrain (the preflight, the
monitor and the instrumented entry run it), the launcher's package, torch, and the top-level
imports of your script that are neither standard library nor files beside it.
"""

from __future__ import annotations

import ast
import sys
from importlib.resources import files
from pathlib import Path

from scaletrain.planning.plan import Plan
from scaletrain.planning.software import JobSoftware

IMPORT_CHECK = "import_check.py"


def import_check_program() -> str:
    """The check's Python source: give it module names as arguments."""
    return (files("scaletrain.launch") / "templates" / IMPORT_CHECK).read_text(encoding="utf-8")


def script_imports(script: Path) -> list[str]:
    """Top-level packages the script imports at module level (not in try blocks), without the
    standard library and modules that are files or folders beside the script."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []  # the job reports a broken or missing script itself
    names: list[str] = []
    for statement in _module_level(tree.body):
        if isinstance(statement, ast.Import):
            names += [alias.name.split(".")[0] for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names.append(statement.module.split(".")[0])
    local = script.parent
    return sorted(
        {
            name
            for name in names
            if name not in sys.stdlib_module_names
            and name != "__future__"
            and not (local / f"{name}.py").exists()
            and not (local / name).is_dir()
        }
    )


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that run on import: the body, and `if` blocks (`if __name__ == ...`)."""
    found: list[ast.stmt] = []
    for statement in body:
        found.append(statement)
        if isinstance(statement, ast.If):
            found += _module_level(statement.body) + _module_level(statement.orelse)
    return found


def required_modules(plan: Plan, workdir: Path, *, runs_scaletrain: bool) -> list[str]:
    """What the job's Python must import, in the order a user would install it;
    `runs_scaletrain`: the job runs scaletrain's own code (preflight, monitor, instrumented
    entry), not only your script."""
    from scaletrain.planning.modes import launch_mode

    wanted = ["scaletrain"] if runs_scaletrain else []
    launcher = launch_mode(plan.mode).launcher_package
    wanted += ["torch", *([launcher] if launcher else [])]
    wanted += script_imports(workdir / plan.script)
    return list(dict.fromkeys(wanted))


def fix_hint(software: JobSoftware, cluster: str) -> str:
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
                f"'source {software.venv}/bin/activate && pip install scaletrain <packages>'."
            )
        return (
            f"make a venv inside the container once ({setup}; {run} python3 -m venv "
            f"--system-site-packages venv; {run} venv/bin/pip install scaletrain <packages>), "
            "then submit with --venv venv (see docs/site-lumi.md)."
        )
    if software.venv:
        return (
            f"install them into {software.venv}: {setup + '; ' if setup else ''}source "
            f"{software.venv}/bin/activate; pip install scaletrain <packages>. A venv made "
            "without the module's Python (python3 -m venv --system-site-packages after the "
            "load) cannot see the module's torch."
        )
    return (
        f"make a venv over the module once: {setup + '; ' if setup else ''}python3 -m venv "
        "--system-site-packages ~/venvs/train; source ~/venvs/train/bin/activate; pip install "
        f"scaletrain <packages>; then submit from it, or give --venv "
        f"(docs/site-{_site(cluster)}.md)."
    )


def _site(cluster: str) -> str:
    return "lumi" if cluster == "lumi" else "puhti-mahti"
