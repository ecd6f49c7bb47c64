"""Write a small MNIST stand-in in MNIST's own file format, from real handwritten digits.

MNIST cannot be downloaded here, but scikit-learn ships 1,797 real 8×8 digit scans. They are
upscaled to 28×28 (8×8 → 24×24, then a 2-pixel border, like MNIST's centred digits) and
written as the idx files that torchvision's MNIST reads from `<root>/MNIST/raw/`.
FashionMNIST keeps the same files in `<root>/FashionMNIST/raw/` (examples/fashion_mnist):

    python examples/mnist/make_small_mnist.py --root .cache/mnist
    python examples/mnist/make_small_mnist.py --root .cache/fashion --dataset FashionMNIST
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import numpy as np

TEST_FRACTION = 1 / 6  # MNIST's own split: 60,000 train / 10,000 test images
_IDX_UBYTE = 0x08  # idx type code for unsigned bytes


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write an unsigned-byte array in the idx format (big-endian header, raw bytes)."""
    header = struct.pack(">HBB", 0, _IDX_UBYTE, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def upscale(images: np.ndarray) -> np.ndarray:
    """8×8 images with values 0..16 → 28×28 with values 0..255."""
    big = np.kron(images, np.ones((1, 3, 3)))  # 8×8 → 24×24, nearest neighbour
    big = np.pad(big, ((0, 0), (2, 2), (2, 2)))
    return np.clip(big * (255 / 16), 0, 255).astype(np.uint8)


def write_small_mnist(root: Path, seed: int = 0, dataset: str = "MNIST") -> Path:
    """Create `<root>/<dataset>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`; return the
    folder (`dataset`: MNIST or FashionMNIST, the class names torchvision looks for)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    images, labels = upscale(digits.images[order]), digits.target[order]
    test_size = int(len(labels) * TEST_FRACTION)
    raw = root / dataset / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, part in (("t10k", slice(0, test_size)), ("train", slice(test_size, None))):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images[part])
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels[part])
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="data root, as for torchvision")
    parser.add_argument("--dataset", choices=("MNIST", "FashionMNIST"), default="MNIST")
    args = parser.parse_args()
    print(f"wrote {write_small_mnist(args.root, dataset=args.dataset)}")


if __name__ == "__main__":
    main()
