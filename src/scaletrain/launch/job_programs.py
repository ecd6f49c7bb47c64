"""The programs a job script runs, written once into the run folder's programs/ by `submit`:
templates/import_check.py and templates/rendezvous_store.py, which run in the job's own Python
where scaletrain may be missing (containers), fed to `python3 -` on stdin so that they need no
bind into a container; and templates/job_functions.sh, the batch shell's functions that every
job shares (its history, waits and requeues). The job script stays what this job does."""

from __future__ import annotations

import ast
from importlib.resources import files
from pathlib import Path

from scaletrain.launch.environment_check import IMPORT_CHECK

RENDEZVOUS_STORE = "rendezvous_store.py"
"""The store of multi-node torchrun and accelerate launches."""
JOB_FUNCTIONS = "job_functions.sh"
"""Sourced by the job script's batch shell."""
JOB_PROGRAMS = (IMPORT_CHECK, RENDEZVOUS_STORE, JOB_FUNCTIONS)


def program_text(name: str) -> str:
    """A program of templates/ as the job runs it; Python without docstrings and comments,
    which explain it in its file, and without annotations, which the job's Python may be too
    old to read (`list[str]` needs Python 3.9)."""
    source = (files("scaletrain.launch") / "templates" / name).read_text(encoding="utf-8")
    if not name.endswith(".py"):
        return source
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            del body[0]
        if isinstance(node, ast.FunctionDef):
            node.returns = None
            for argument in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                argument.annotation = None
    return ast.unparse(tree) + "\n"


def write_job_programs(folder: Path) -> list[Path]:
    """Write every program into `folder` (made if missing); the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in JOB_PROGRAMS:
        path = folder / name
        path.write_text(program_text(name), encoding="utf-8")
        written.append(path)
    return written


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
