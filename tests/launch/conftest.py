"""Fixtures of the launch tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.slurm_jobs import EXAMPLE


@pytest.fixture(scope="module")
def mnist_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small MNIST stand-in, written once (as `--create-small-data` would on rank 0)."""
    spec = importlib.util.spec_from_file_location(
        "make_small_mnist", EXAMPLE.with_name("make_small_mnist.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("mnist")
    module.write_small_mnist(root)
    return root
