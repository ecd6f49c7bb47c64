"""Validated profiles are kept in the user's cache: read again without pydantic, validated
again whenever the file, its base profile or the schema's code differ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scaletrain.clusters import profile_cache
from scaletrain.clusters.catalog import ProfileError, load_profile
from scaletrain.clusters.profile_cache import cached_profile, profile_cache_folder
from scaletrain.clusters.schema import ClusterProfile
from tests.clusters.site_files import MINIMAL, user_site


def modules_after(code: str, environ: dict[str, str]) -> set[str]:
    """The modules a fresh Python has imported after running `code`."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], env=environ, capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_the_schema_and_the_catalog_import_no_pydantic() -> None:
    imported = modules_after("import scaletrain.clusters.catalog, scaletrain.cli.clusters", {})
    assert "scaletrain.clusters.schema" in imported
    assert not {"pydantic", "annotated_types"} & imported


def test_a_profile_read_before_is_taken_from_the_cache(tmp_path: Path) -> None:
    environ = user_site(tmp_path, "site", MINIMAL)
    first = load_profile("site", environ)
    assert profile_cache_folder(environ) == tmp_path / ".cache" / "scaletrain" / "profiles"
    assert len(list((tmp_path / ".cache" / "scaletrain" / "profiles").iterdir())) == 1
    code = (
        "from scaletrain.clusters.catalog import load_profile\n"
        f"print(repr(load_profile('site', {environ!r})))"
    )
    imported = modules_after(code, environ)
    assert "pydantic" not in imported
    again = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() == repr(first)


def test_scaletrain_clusters_imports_no_pydantic_once_its_profiles_are_cached(
    tmp_path: Path,
) -> None:
    environ = {"HOME": str(tmp_path), "NO_COLOR": "1"}
    code = "from scaletrain.cli.start import main\nsys.argv = ['scaletrain', 'clusters']\n" + (
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    modules_after(code, environ)  # validates the packaged profiles once
    assert not {"pydantic", "annotated_types"} & modules_after(code, environ)


def test_a_changed_profile_is_validated_again(tmp_path: Path) -> None:
    environ = user_site(tmp_path, "site", MINIMAL)
    assert load_profile("site", environ).node.gpus == 4
    user_site(tmp_path, "site", MINIMAL.replace("gpus = 4\n", "gpus = 0\n"))
    with pytest.raises(ProfileError, match=r"node\.gpus: Input should be greater than 0"):
        load_profile("site", environ)
    user_site(tmp_path, "site", MINIMAL.replace("cores = 16", "cores = 8"))
    assert load_profile("site", environ).default_per_gpu.cores == 8


def test_the_key_is_the_data_and_the_schema_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    validated: list[dict[str, Any]] = []

    def validate(data: dict[str, Any]) -> ClusterProfile:
        validated.append(data)
        return load_profile("local", {})

    data = {"source": "site.toml", "description": "one"}
    for _ in range(2):
        cached_profile(tmp_path, data, validate)
    assert len(validated) == 1
    cached_profile(tmp_path, data | {"description": "two"}, validate)  # an edit, or its base's
    assert len(validated) == 2
    monkeypatch.setattr(profile_cache, "_schema_code", lambda: "another version of the schema")
    cached_profile(tmp_path, data | {"description": "two"}, validate)
    assert len(validated) == 3


def test_a_damaged_cache_file_costs_only_the_validation(tmp_path: Path) -> None:
    environ = user_site(tmp_path, "site", MINIMAL)
    expected = load_profile("site", environ)
    (cached,) = (tmp_path / ".cache" / "scaletrain" / "profiles").iterdir()
    cached.write_bytes(b"not a pickle")
    assert load_profile("site", environ) == expected
    assert cached.read_bytes() != b"not a pickle"  # written again, whole


def test_an_unwritable_cache_costs_only_the_validation(tmp_path: Path) -> None:
    environ = user_site(tmp_path, "site", MINIMAL) | {"XDG_CACHE_HOME": str(tmp_path / "file")}
    (tmp_path / "file").write_text("a file, not a folder")
    assert load_profile("site", environ).node.gpus == 4


def test_without_a_home_every_read_is_validated() -> None:
    assert profile_cache_folder({}) is None
    assert profile_cache_folder({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path(
        "/c/scaletrain/profiles"
    )
    assert load_profile("lumi", {}).node.gpus == 8
