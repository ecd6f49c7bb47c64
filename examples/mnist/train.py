"""Train CSC's MNIST ConvNet with data-parallel PyTorch — the same script on a laptop CPU,
on 2 local processes, or on 16 GPUs across two LUMI nodes.

    scaletrain run --nproc 2 examples/mnist/train.py --data-dir .cache/mnist --create-small-data

Compared with a 1-GPU script, the scaletrain lines are: init() (launcher, device, process
group), wrap() (DDP), loader() (global batch split over ranks), Checkpointer (save, resume,
stop cleanly before a time limit), Progress (rank-0 output), total() (metrics over all
ranks) and shutdown().

Run the same command again (or let Slurm requeue the job) and it continues from its last
checkpoint in runs/<name>/checkpoints/; --no-checkpoints trains from scratch, saving nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import struct
from contextlib import AbstractContextManager
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import scaletrain as st

# MNIST's pixel mean and standard deviation (the usual torchvision Normalize values).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def read_idx(path: Path) -> torch.Tensor:
    """Read an idx file (MNIST's format: big-endian header, then raw unsigned bytes)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as file:
        data = file.read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims :]), dtype=torch.uint8).reshape(shape)


def find_file(raw: Path, name: str) -> Path:
    for candidate in (raw / name, raw / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"MNIST file {name}[.gz] not found in {raw}.\n"
        f"HINT: download MNIST there on a login node (torchvision.datasets.MNIST(root, "
        f"download=True)), or pass --create-small-data for a small real stand-in."
    )


def load_mnist(root: Path, *, train: bool) -> TensorDataset:
    """MNIST from the files torchvision's MNIST class reads: <root>/MNIST/raw/*-ubyte[.gz]."""
    raw, prefix = root / "MNIST" / "raw", "train" if train else "t10k"
    images = read_idx(find_file(raw, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_file(raw, f"{prefix}-labels-idx1-ubyte"))
    images = (images.float().unsqueeze(1) / 255 - MNIST_MEAN) / MNIST_STD  # N×1×28×28
    return TensorDataset(images, labels.long())


class ConvNet(nn.Module):
    """The CNN of CSC's pytorch-ddp-examples/mnist_ddp.py: two conv blocks and a classifier."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()

        def block(channels_in: int, channels_out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(channels_in, channels_out, kernel_size=5, padding=2),
                nn.BatchNorm2d(channels_out),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )

        self.features = nn.Sequential(block(1, 16), block(16, 32))  # 28×28 → 14×14 → 7×7
        self.classifier = nn.Linear(7 * 7 * 32, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).flatten(1))


def gradient_sync(model: nn.Module, *, last_micro_batch: bool) -> AbstractContextManager[None]:
    """DDP averages gradients over ranks at every backward(); when several micro-batches make
    one step, only the last one needs it (no_sync keeps the others' gradients local)."""
    if isinstance(model, DistributedDataParallel) and not last_micro_batch:
        return model.no_sync()
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    """Accuracy over the whole test set: each rank counts its shard, then counts are summed."""
    model.eval()
    correct = seen = 0
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        predictions = model(images).argmax(dim=1)
        correct += int((predictions == labels.to(device, non_blocking=True)).sum())
        seen += len(labels)
    model.train()
    return st.total(correct) / st.total(seen)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a ConvNet on MNIST with scaletrain.")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="MNIST root folder")
    parser.add_argument(
        "--create-small-data",
        action="store_true",
        help="write a small real stand-in (scikit-learn digits) if MNIST is missing",
    )
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--batch-size", type=int, default=64, help="global batch size: split over all processes"
    )
    parser.add_argument(
        "--accumulation-steps",
        type=int,
        default=1,
        help="micro-batches per step: the same step in less GPU memory",
    )
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-checkpoints", action="store_true", help="neither resume nor save checkpoints"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    env = st.init()
    st.seed_everything(args.seed)  # same seed everywhere: identical initial weights

    # Rank 0 prepares the data (as a download would), the others wait and then read it.
    with st.rank_zero_first():
        raw = args.data_dir / "MNIST" / "raw"
        if args.create_small_data and not (raw / "train-labels-idx1-ubyte").exists():
            from make_small_mnist import write_small_mnist

            write_small_mnist(args.data_dir)
    train_set = load_mnist(args.data_dir, train=True)
    test_set = load_mnist(args.data_dir, train=False)

    # BatchNorm statistics averaged over all ranks where PyTorch can (GPUs); on the CPU each
    # rank keeps its own, as asking for SyncBatchNorm there would only warn.
    model = st.wrap(ConvNet(), sync_batchnorm_layers=env.device.type != "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # e.g. global batch 64 over 2 processes = 32 images per process per step
    train_loader = st.loader(train_set, global_batch_size=args.batch_size, seed=args.seed)
    test_loader = st.eval_loader(test_set, global_batch_size=256)
    st.print0(
        f"{len(train_set)} training images, {len(test_set)} test images, "
        f"{len(train_loader)} steps per epoch of {args.batch_size} images"
    )

    # Saves model, optimizer, data position and random states as often as costs ~2% of the
    # time (measured: every 1 to 30 minutes), when the job is asked to stop (time limit,
    # preemption) and at the end; resumes the newest checkpoint.
    ckpt = st.Checkpointer(model=model, optimizer=optimizer, enabled=not args.no_checkpoints)
    progress = st.Progress(
        args.epochs * len(train_loader), samples_per_step=args.batch_size, start_step=ckpt.step
    )
    for epoch in ckpt.epochs(args.epochs):  # starts at the saved epoch when resuming
        # A new shuffle every epoch, disjoint per rank; when resuming, the rest of that epoch.
        for images, labels in ckpt.batches(train_loader):
            # Pinned batches (st.loader pins them on GPUs) are copied while the GPU computes.
            images = images.to(env.device, non_blocking=True)
            labels = labels.to(env.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            # e.g. 32 images per process in 2 micro-batches of 16: the same step, half the memory
            parts = list(
                zip(
                    images.chunk(args.accumulation_steps),
                    labels.chunk(args.accumulation_steps),
                    strict=True,
                )
            )
            for number, (part_images, part_labels) in enumerate(parts, start=1):
                loss = nn.functional.cross_entropy(model(part_images), part_labels)
                # DDP averages the gradients of all ranks at the last micro-batch's backward.
                with gradient_sync(model, last_micro_batch=number == len(parts)):
                    (loss / len(parts)).backward()
            optimizer.step()
            progress.update(epoch=epoch, loss=loss)
        accuracy = evaluate(model, test_loader, env.device)
        st.print0(f"epoch {epoch}: test accuracy {accuracy:.1%}")

    progress.finish(test_accuracy=evaluate(model, test_loader, env.device))
    st.shutdown()


if __name__ == "__main__":
    main()
