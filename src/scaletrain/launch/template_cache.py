"""Compiled job-script templates kept between commands, in the user's cache folder.

Jinja compiles a template to Python code before rendering it; for the job script's templates
that is most of `scaletrain plan`'s own time (~0.08 s of ~0.35 s on one core). Jinja's
bytecode cache (its public API) keeps the compiled code; a template or a setting of the
Environment that changed since is compiled again. A folder that cannot be read or written
only costs that compile, never the command.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Mapping
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket


def template_cache_folder(environ: Mapping[str, str]) -> Path:
    """`$XDG_CACHE_HOME/scaletrain/job-templates`, with XDG's default `~/.cache`."""
    cache_home = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    return Path(cache_home).expanduser() / "scaletrain" / "job-templates"


def _settings(environment: jinja2.Environment) -> str:
    """What the compiled code depends on beyond the template's text."""
    finalize = getattr(environment.finalize, "__qualname__", None)
    return repr(
        (
            jinja2.__version__,
            environment.block_start_string,
            environment.block_end_string,
            environment.variable_start_string,
            environment.variable_end_string,
            environment.comment_start_string,
            environment.comment_end_string,
            environment.line_statement_prefix,
            environment.line_comment_prefix,
            environment.trim_blocks,
            environment.lstrip_blocks,
            environment.newline_sequence,
            environment.keep_trailing_newline,
            environment.autoescape,
            environment.optimized,
            finalize,
            sorted(environment.extensions),
        )
    )


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache, keyed by the template's text and the Environment's settings."""

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))

    def get_bucket(
        self, environment: jinja2.Environment, name: str, filename: str | None, source: str
    ) -> Bucket:
        # The checksum stored with the code covers the settings: other settings, other code.
        text = f"{_settings(environment)}\n{source}"
        return super().get_bucket(environment, name, filename, text)

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
            # unreadable or damaged: compiled again (and written anew)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with contextlib.suppress(OSError):
            Path(self.directory).mkdir(mode=0o700, parents=True, exist_ok=True)
            super().dump_bytecode(bucket)
