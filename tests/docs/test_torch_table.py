"""The docs' table of the torch releases the sites ship is the one the code reads."""

from __future__ import annotations

from scaletrain.core.torch_support import torch_support
from tests.conftest import REPO


def test_the_docs_table_is_torch_support_toml() -> None:
    text = (REPO / "docs" / "clusters-and-planning.md").read_text(encoding="utf-8")
    section = text.split("## The torch of your site", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")][1:]
    documented = [(where.removeprefix("| "), torch.removesuffix(" |")) for where, torch in rows]
    assert documented == [(site["where"], site["torch"]) for site in torch_support().sites]
    support = torch_support()
    assert f"torch {support.oldest} to\n{support.newest}" in section
