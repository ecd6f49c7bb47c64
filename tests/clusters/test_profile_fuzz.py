"""Fuzz: a user's profile file as bytes, as any TOML text, and as a valid profile with one value
changed to anything. Listing, showing and planning with it give a result or one clean error
that names the file; the file itself is never changed."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from scaletrain.core.toml_text import parse_toml
from tests.clusters.site_files import MINIMAL
from tests.support.cli import assert_clean, invoke, login_node
from tests.support.fuzz import FUZZ, hostile_text

VALID = parse_toml(MINIMAL)

toml_values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False),
        hostile_text.filter(lambda text: not any(0xD800 <= ord(c) <= 0xDFFF for c in text)),
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["rule", "x", "gpus", "max_time"]), children, max_size=3)
    ),
    max_leaves=6,
)


def _paths(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of the valid profile, sections and values alike."""
    found = []
    for key, value in data.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found += _paths(value, (*prefix, key))
    return found


@st.composite
def changed_profiles(draw: st.DrawFn) -> str:
    """The valid profile with one value replaced, removed, or one key added."""
    data = parse_toml(MINIMAL)
    path = draw(st.sampled_from(_paths(VALID)))
    *parents, key = path
    section = data
    for parent in parents:
        section = section[parent]
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if action == "remove":
        del section[key]
    elif action == "add":
        section[draw(st.sampled_from(["colour", "gpus", "name", "source", "auto"]))] = draw(
            toml_values
        )
    else:
        section[key] = draw(toml_values)
    return tomli_w.dumps(data)


profile_files = st.one_of(
    changed_profiles().map(str.encode),
    st.text(max_size=300).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
)


@contextlib.contextmanager
def site_with(content: bytes) -> Iterator[Path]:
    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="fuzz-profile-") as folder:
        root = Path(folder)
        profiles = root / "config" / "scaletrain" / "clusters"
        profiles.mkdir(parents=True)
        (profiles / "fz.toml").write_bytes(content)
        (root / "train.py").write_text("print('hi')\n")
        os.chdir(root)
        try:
            yield profiles / "fz.toml"
        finally:
            os.chdir(previous)


@FUZZ
@given(content=profile_files)
def test_any_profile_file_is_used_or_refused_cleanly(content: bytes) -> None:
    with site_with(content) as profile:
        env = login_node(profile.parents[3])
        for arguments in (
            ["clusters"],
            ["clusters", "show", "fz"],
            ["plan", "-c", "fz", "-g", "1", "-t", "1:00:00", "train.py"],
            ["submit", "-c", "fz", "-N", "1", "--gpus-per-node", "1", "-t", "1:00:00",
             "--dry-run", "train.py"],
        ):  # fmt: skip
            outcome = invoke(*arguments, env=env)
            assert_clean(outcome, f"scaletrain {arguments} with {content!r}")
            assert outcome.exit_code in (0, 2)
            if outcome.exit_code == 2 and arguments[0] == "clusters":
                assert "fz" in outcome.stderr  # the error names the file
        assert profile.read_bytes() == content
