"""Which torch releases scaletrain is tested with (torch_support.toml), and what it says about
one outside them: st.init(), the preflight and the job's check of its Python name the torch
they found and the tested range, instead of failing later inside torch's internals.

No torch here: the job's check runs where torch may be missing, and login-node tools read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from scaletrain.core.toml_text import parse_toml


@dataclass(frozen=True, slots=True)
class TorchSupport:
    oldest: str
    newest: str
    sites: tuple[dict[str, str], ...]

    @property
    def tested_range(self) -> str:
        return f"{self.oldest} to {self.newest}"


@cache
def torch_support() -> TorchSupport:
    table: dict[str, Any] = parse_toml(
        (files("scaletrain.core") / "torch_support.toml").read_text(encoding="utf-8")
    )
    return TorchSupport(table["oldest"], table["newest"], tuple(table.get("site", ())))


def release(version: str) -> tuple[int, int, int]:
    """'2.7.1+rocm6.2' -> (2, 7, 1); parts that are not numbers count as 0."""
    numbers = version.split("+")[0].split(".")[:3]
    major, minor, patch = [*(int(part) if part.isdigit() else 0 for part in numbers), 0, 0, 0][:3]
    return major, minor, patch


def minor(version: str) -> str:
    """'2.7.1' -> '2.7'."""
    major, minor_release, _ = release(version)
    return f"{major}.{minor_release}"


def untested(version: str) -> str | None:
    """What to say about torch `version` when it lies outside the tested range, else None."""
    support = torch_support()
    found = release(version)
    # By minor release: a later patch of a tested minor is taken as tested.
    if found[:2] < release(support.oldest)[:2]:
        return (
            f"torch {version} is older than scaletrain is tested with ({support.tested_range}): "
            "its checkpoints and strategies may fail inside torch; use a torch from "
            f"{support.oldest} on (a newer image or module)"
        )
    if found[:2] > release(support.newest)[:2]:
        return (
            f"torch {version} is newer than scaletrain is tested with ({support.tested_range}): "
            "it probably works; a checkpoint it writes may not load in an older torch"
        )
    return None
