"""Compiled job templates kept between commands: the job script is the same with them, and
code compiled for other text or other settings, damaged, or unwritable is never used."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from scaletrain.launch.template_cache import TemplateCache, template_cache_folder
from tests.conftest import clean_environ, scaletrain

TEMPLATE = "{% if on %}\n  yes\n{% endif %}\n"


def rendered(folder: Path, *, trim_blocks: bool, template: str = TEMPLATE) -> str:
    """The template rendered by a new Environment (as a new command would) with the cache."""
    environment = jinja2.Environment(
        loader=jinja2.DictLoader({"t.j2": template}),
        bytecode_cache=TemplateCache(folder),
        trim_blocks=trim_blocks,
    )
    return environment.get_template("t.j2").render(on=True)


def test_plan_shows_the_same_job_with_compiled_templates_kept(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    cache = tmp_path / "cache"
    plan = ("plan", "-c", "lumi", "-g", "16", "-t", "2:00:00", "--json", "train.py")
    outputs = []
    for _ in range(2):  # compiles and keeps, then reads what it kept
        result = scaletrain(*plan, cwd=tmp_path, environ=clean_environ(XDG_CACHE_HOME=str(cache)))
        assert result.returncode == 0, result.stderr
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    assert list(template_cache_folder({"XDG_CACHE_HOME": str(cache)}).glob("*.cache"))


def test_the_cache_folder_follows_xdg() -> None:
    assert template_cache_folder({"HOME": "/home/me"}) == Path(
        "/home/me/.cache/scaletrain/job-templates"
    )
    assert template_cache_folder({"HOME": "/home/me", "XDG_CACHE_HOME": "/scratch/c"}) == Path(
        "/scratch/c/scaletrain/job-templates"
    )


def test_code_compiled_for_other_settings_or_text_is_not_used(tmp_path: Path) -> None:
    assert rendered(tmp_path, trim_blocks=True) == "  yes\n"
    # Same template, other settings: trim_blocks keeps the line breaks after the tags now.
    assert rendered(tmp_path, trim_blocks=False) == "\n  yes\n"
    assert rendered(tmp_path, trim_blocks=True) == "  yes\n"
    assert rendered(tmp_path, trim_blocks=True, template="{{ on }}") == "True"


def test_a_damaged_or_unwritable_cache_costs_only_the_compile(tmp_path: Path) -> None:
    assert rendered(tmp_path, trim_blocks=True) == "  yes\n"
    for kept in tmp_path.iterdir():
        kept.write_bytes(kept.read_bytes()[:40])  # cut short, as by a full disk
    assert rendered(tmp_path, trim_blocks=True) == "  yes\n"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert rendered(blocked / "cache", trim_blocks=True) == "  yes\n"
