"""The seed's image examples (CaSToRC, seed 002) train to their documented accuracy on the
stand-in data, written in the data sets' own formats and read by torchvision's classes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from tests.conftest import REPO, scaletrain

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

# Documented in each example's README for its stand-in data.
FASHION_MNIST_ACCURACY = 0.90  # WRN-10-1, 4 epochs (runs here: 97-98%)
CIFAR100_ACCURACY = 0.25  # tiny EfficientNet, 6 epochs; chance is 1% (runs here: 38-40%)


def train(tmp_path: Path, example: str, *args: str) -> dict[str, float]:
    result = scaletrain(
        "run", "--nproc", "2", "--name", example, str(REPO / "examples" / example / "train.py"),
        "--data-dir", str(tmp_path / "data"), "--create-small-data", *args,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary: dict[str, float] = json.loads(
        (tmp_path / "runs" / example / "metrics" / "summary.json").read_text()
    )
    return summary


def test_wide_resnet_on_fashion_mnist(tmp_path: Path) -> None:
    summary = train(tmp_path, "fashion_mnist", "--depth", "10", "--width", "1", "--epochs", "4")
    assert summary["test_accuracy"] >= FASHION_MNIST_ACCURACY
    raw = tmp_path / "data" / "FashionMNIST" / "raw"  # where torchvision's class looks
    assert (raw / "t10k-labels-idx1-ubyte").stat().st_size == 8 + 299


def test_efficientnet_with_auxiliary_classifier_on_cifar100(tmp_path: Path) -> None:
    args = ("--model", "tiny", "--epochs", "6", "--batch-size", "64")
    summary = train(tmp_path, "cifar100", *args)
    assert summary["test_accuracy"] >= CIFAR100_ACCURACY
    meta = pickle.loads((tmp_path / "data" / "cifar-100-python" / "meta").read_bytes())
    assert len(meta["fine_label_names"]) == 100 and len(meta["coarse_label_names"]) == 20
