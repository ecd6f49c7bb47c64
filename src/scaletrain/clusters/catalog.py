"""Where cluster profiles come from: TOML files in the package, then the user's own.

A user file `$XDG_CONFIG_HOME/scaletrain/clusters/<name>.toml` (default `~/.config/...`)
adds a cluster, or replaces the packaged profile of the same name; with `extends = "lumi"`
it changes only what it names in the packaged profile (tables merge key by key).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaletrain.clusters.profile_cache import cached_profile, profile_cache_folder
from scaletrain.clusters.schema import ClusterProfile
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.toml_text import TomlError, parse_toml

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from pydantic import TypeAdapter

SCHEMA_DOC = "docs/clusters-and-planning.md"


class ProfileError(ScaletrainError):
    """A cluster profile is missing or its file is broken."""


@dataclass(frozen=True, slots=True)
class ProfileFile:
    name: str
    location: Traversable
    """A packaged resource or a user's file."""
    origin: str
    """'packaged' or 'user'."""


def user_profile_folder(environ: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/scaletrain/clusters`, with XDG's default `~/.config`."""
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(config_home).expanduser() / "scaletrain" / "clusters"


def profile_files(environ: Mapping[str, str]) -> dict[str, ProfileFile]:
    """Every known profile by name, user files replacing packaged ones; sorted by name."""
    found: dict[str, ProfileFile] = {}
    packaged = files("scaletrain.clusters") / "profiles"
    for resource in packaged.iterdir():
        if resource.name.endswith(".toml"):
            name = resource.name.removesuffix(".toml")
            found[name] = ProfileFile(name, resource, "packaged")
    user_folder = user_profile_folder(environ)
    if user_folder.is_dir():
        for path in user_folder.glob("*.toml"):
            found[path.stem] = ProfileFile(path.stem, path, "user")
    return dict(sorted(found.items()))


def load_profile(name: str, environ: Mapping[str, str]) -> ClusterProfile:
    """The profile called `name`; an unknown name is an error listing the known ones."""
    known = profile_files(environ)
    if name not in known:
        close = difflib.get_close_matches(name.lower(), known, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise ProfileError(
            f"There is no cluster profile called {name!r}; known: {', '.join(known)}.",
            f"{guess}Add your own site as {user_profile_folder(environ) / (name + '.toml')} "
            f"(see {SCHEMA_DOC}).",
        )
    return read_profile(known[name], environ)


def read_profile(profile_file: ProfileFile, environ: Mapping[str, str]) -> ClusterProfile:
    """Parse and validate one file (or take it from the user's cache of validated profiles);
    errors name the file, the field and the fix."""
    location = profile_file.location
    if isinstance(location, Path):  # the user's file: anything may be wrong with it
        text = read_text(location, "cluster profile")
    else:
        text = location.read_text(encoding="utf-8")
    return profile_from_text(
        profile_file.name,
        text,
        where=str(profile_file.location),
        cache_folder=profile_cache_folder(environ),
    )


def profile_from_text(
    name: str, text: str, *, where: str, cache_folder: Path | None = None
) -> ClusterProfile:
    """Parse and validate a profile's TOML text; `where` names it in errors. A profile
    validated before with the same data is taken from `cache_folder` (profile_cache.py)."""
    try:
        data: dict[str, Any] = parse_toml(text)
    except TomlError as error:
        raise ProfileError(
            f"{where} is not valid TOML: {error}.", "fix the syntax at that line and column."
        ) from None
    if "extends" in data:
        data = _merged(_packaged_data(str(data.pop("extends")), where), data)
    broken = _line_breaks(data)
    if broken:
        raise ProfileError(
            f"{where}: {broken} holds a line break or control character; job scripts take "
            "each value as one line.",
            "write that value on one line (setup takes a list: one item per shell line).",
        )
    for derived in ("name", "source"):
        if derived in data:
            raise ProfileError(
                f"{where}: field {derived!r} is not allowed.",
                f"remove it; the {derived} comes from the file name and place.",
            )
    return cached_profile(cache_folder, {**data, "name": name, "source": where}, _validated)


@cache
def _validator() -> TypeAdapter[ClusterProfile]:
    from pydantic import TypeAdapter

    return TypeAdapter(ClusterProfile)


def _validated(data: dict[str, Any]) -> ClusterProfile:
    """The profile pydantic makes of `data`; its errors in one ProfileError."""
    from pydantic import ValidationError

    try:
        return _validator().validate_python(data)
    except ValidationError as error:
        problems = "; ".join(_describe(detail) for detail in error.errors())
        raise ProfileError(
            f"{data['source']}: {problems}.",
            f"correct the named field(s); the schema is in {SCHEMA_DOC}.",
        ) from None


def _line_breaks(value: Any, path: str = "") -> str | None:
    """The first field (or key) whose text holds a control character other than a tab."""
    if isinstance(value, str):
        return path if any((ord(c) < 32 and c != "\t") or c == "\x7f" for c in value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = _line_breaks(str(key), where) or _line_breaks(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _line_breaks(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _packaged_data(name: str, where: str) -> dict[str, Any]:
    """The TOML data of the packaged profile `name`, which a user's profile extends."""
    resource = files("scaletrain.clusters") / "profiles" / f"{name}.toml"
    if not resource.is_file():
        packaged = sorted(
            item.name.removesuffix(".toml")
            for item in (files("scaletrain.clusters") / "profiles").iterdir()
            if item.name.endswith(".toml")
        )
        raise ProfileError(
            f"{where}: extends = {name!r} names no packaged profile.",
            f"extend one of {', '.join(packaged)}, or write the whole profile without `extends`.",
        )
    return parse_toml(resource.read_text(encoding="utf-8"))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` on top: tables merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(detail: Mapping[str, Any]) -> str:
    """`partitions.gpu.max_time: <message>` from one pydantic error."""
    parts = [str(part) for part in detail["loc"]]
    # pydantic puts a partition billing rule's kind (its `rule` value) into the path after
    # partitions.<name>.billing; users never wrote it there.
    path = ".".join(
        part
        for index, part in enumerate(parts)
        if not (index >= 3 and parts[index - 3] == "partitions" and parts[index - 1] == "billing")
    )
    message = str(detail["msg"]).removeprefix("Value error, ")
    if detail["type"] == "unexpected_keyword_argument":  # a key the section does not name
        message = "unknown field (misspelt, or in the wrong [section])"
    elif detail["type"] == "missing":
        message = "missing (required)"
    return f"{path}: {message}" if path else message
