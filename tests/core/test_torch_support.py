"""Which torch releases scaletrain is tested with, and what it says about others."""

from __future__ import annotations

import pytest

from scaletrain.core.torch_support import release, torch_support, untested


def test_release_numbers_as_torch_writes_them() -> None:
    assert release("2.7.1+rocm6.2.4") == (2, 7, 1)
    assert release("2.10.0a0+git1234") == (2, 10, 0)
    assert release("2.15") == (2, 15, 0)


@pytest.mark.parametrize("version", ["2.7.0", "2.7.1", "2.10.0", "2.14.1+cu128", "2.15.9"])
def test_releases_of_the_tested_minors_are_tested(version: str) -> None:
    assert untested(version) is None


def test_older_and_newer_releases_are_named_with_the_tested_range() -> None:
    support = torch_support()
    assert (support.oldest, support.newest) == ("2.7.1", "2.15.0")
    older = untested("2.6.0")
    assert older is not None and older.startswith(
        "torch 2.6.0 is older than scaletrain is tested with (2.7.1 to 2.15.0)"
    )
    newer = untested("2.16.0")
    assert newer is not None and "a checkpoint it writes may not load in an older torch" in newer


def test_the_sites_torch_lies_in_the_tested_range() -> None:
    """The docs promise that what LUMI and CSC ship works."""
    for site in torch_support().sites:
        assert untested(site["torch"]) is None, site["where"]
