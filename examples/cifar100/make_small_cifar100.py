"""Write a small CIFAR-100 stand-in in CIFAR-100's own format, from two real photographs.

CIFAR-100 cannot be downloaded here. scikit-learn ships two real 427×640 colour photographs
(china.jpg, flower.jpg); each of the 100 classes is one place in one of them, and its images
are 32×32 patches cut around that place with a random shift, brightness and noise. The files
are what torchvision's CIFAR100 reads from `<root>/cifar-100-python/`: pickled dicts
`train`, `test` (data: N×3072 uint8, fine_labels, coarse_labels) and `meta`.

torchvision checks those files against the real data set's MD5 sums; the stand-in's sums are
written beside them (stand-in-md5.json) for the example to check against instead.

    python examples/cifar100/make_small_cifar100.py --root .cache/cifar100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
from pathlib import Path

import numpy as np

CLASSES, TRAIN_PER_CLASS, TEST_PER_CLASS = 100, 8, 2
SIZE, SHIFT = 32, 3  # 32×32 patches, up to ±3 pixels from the class's place
FOLDER = "cifar-100-python"
CHECKSUMS = "stand-in-md5.json"


def class_places(height: int, width: int, count: int) -> list[tuple[int, int]]:
    """`count` patch corners on a grid over one photograph, away from its borders."""
    rows = 5
    columns = count // rows
    ys = np.linspace(SHIFT, height - SIZE - SHIFT, rows).astype(int)
    xs = np.linspace(SHIFT, width - SIZE - SHIFT, columns).astype(int)
    return [(int(y), int(x)) for y in ys for x in xs]


def patches(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test images (N×32×32×3 uint8) and their labels."""
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    photos = load_sample_images().images  # two 427×640×3 uint8 arrays
    places = [
        (photo, place)
        for photo in photos
        for place in class_places(*photo.shape[:2], CLASSES // len(photos))
    ]
    images, labels = [], []
    for label, (photo, (y, x)) in enumerate(places):
        for _ in range(TRAIN_PER_CLASS + TEST_PER_CLASS):
            dy, dx = rng.integers(-SHIFT, SHIFT + 1, size=2)
            patch = photo[y + dy : y + dy + SIZE, x + dx : x + dx + SIZE].astype(np.float32)
            patch = patch * rng.uniform(0.8, 1.2) + rng.normal(0, 6, patch.shape)
            images.append(np.clip(patch, 0, 255).astype(np.uint8))
            labels.append(label)
    images_array, labels_array = np.stack(images), np.array(labels)
    test = np.tile(
        np.arange(TRAIN_PER_CLASS + TEST_PER_CLASS) >= TRAIN_PER_CLASS, CLASSES
    )  # the last images of each class
    return images_array[~test], labels_array[~test], images_array[test], labels_array[test]


def _split(images: np.ndarray, labels: np.ndarray, name: str) -> dict[str, object]:
    # CIFAR's layout: each row is 1024 red, 1024 green, 1024 blue values, row-major.
    return {
        "batch_label": f"stand-in {name} batch",
        "data": images.transpose(0, 3, 1, 2).reshape(len(images), -1),
        "fine_labels": labels.tolist(),
        "coarse_labels": (labels // 5).tolist(),  # CIFAR-100: 20 superclasses of 5
        "filenames": [f"{name}_{index:05d}.png" for index in range(len(images))],
    }


def write_small_cifar100(root: Path, seed: int = 0) -> Path:
    """Create <root>/cifar-100-python/{train,test,meta} and their MD5 sums; return the folder."""
    train_images, train_labels, test_images, test_labels = patches(seed)
    folder = root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    contents = {
        "train": _split(train_images, train_labels, "training"),
        "test": _split(test_images, test_labels, "testing"),
        "meta": {
            "fine_label_names": [f"place_{label:02d}" for label in range(CLASSES)],
            "coarse_label_names": [f"places_{group:02d}" for group in range(CLASSES // 5)],
        },
    }
    sums = {}
    for name, content in contents.items():
        data = pickle.dumps(content, protocol=2)
        (folder / name).write_bytes(data)
        sums[name] = hashlib.md5(data).hexdigest()
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=2) + "\n")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="data root, as for torchvision")
    args = parser.parse_args()
    print(f"wrote {write_small_cifar100(args.root)}")


if __name__ == "__main__":
    main()
