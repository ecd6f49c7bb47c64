"""Validated cluster profiles kept between commands, in the user's cache folder.

pydantic validates a profile the first time scaletrain reads it; building that validator is
most of what `scaletrain plan` or `clusters` would spend on a login node. A profile read
before, with the same data and the same schema code, is taken from the cache instead: one file
per profile, holding the key of what was validated and the result. Any other file, or one that
cannot be read or written, only costs the validation, never the command.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from scaletrain import __version__
from scaletrain.clusters import billing, constraints, schema, slurm_time
from scaletrain.clusters.schema import ClusterProfile


def profile_cache_folder(environ: Mapping[str, str]) -> Path | None:
    """`$XDG_CACHE_HOME/scaletrain/profiles`, with XDG's default `~/.cache`; None where
    neither is set (every read is then validated)."""
    cache_home = environ.get("XDG_CACHE_HOME") or (
        str(Path(environ["HOME"]) / ".cache") if environ.get("HOME") else None
    )
    return Path(cache_home).expanduser() / "scaletrain" / "profiles" if cache_home else None


@cache
def _schema_code() -> str:
    """What the validation of a profile depends on besides its data: the schema's source."""
    digest = hashlib.sha256(f"{__version__} {sys.version}".encode())
    for module in (constraints, billing, slurm_time, schema):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def cached_profile(
    folder: Path | None,
    data: dict[str, Any],
    validate: Callable[[dict[str, Any]], ClusterProfile],
) -> ClusterProfile:
    """`validate(data)`, or the profile it gave before for the same data and schema."""
    if folder is None:
        return validate(data)
    try:
        key = hashlib.sha256(f"{_schema_code()} {data!r}".encode()).hexdigest()
    except OSError:  # the schema's source cannot be read (a zipped install): no cache
        return validate(data)
    path = folder / (hashlib.sha256(str(data["source"]).encode()).hexdigest()[:32] + ".pickle")
    with contextlib.suppress(Exception):  # missing, damaged or from another version: validate
        found_key, profile = pickle.loads(path.read_bytes())
        if found_key == key and isinstance(profile, ClusterProfile):
            return profile
    profile = validate(data)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        written = path.with_name(f"{path.name}.{os.getpid()}")  # whole, or not at all
        written.write_bytes(pickle.dumps((key, profile)))
        written.replace(path)
    return profile
