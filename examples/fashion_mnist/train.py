"""Train a WideResNet with SyncBatchNorm on FashionMNIST — CaSToRC's multi-GPU example
(seed 002) with scaletrain: torchvision's FashionMNIST class, rank 0 prepares the data,
BatchNorm statistics averaged over all GPUs, metrics summed over all ranks.

    scaletrain run --nproc 2 examples/fashion_mnist/train.py --data-dir .cache/fashion \\
        --create-small-data --depth 10 --width 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torchvision import datasets, transforms

import scaletrain as st

# FashionMNIST's pixel mean and standard deviation.
MEAN, STD = 0.2860, 0.3530


class BasicBlock(nn.Module):
    """Pre-activation residual block of a wide ResNet: BN-ReLU-conv, BN-ReLU-conv."""

    def __init__(self, channels_in: int, channels_out: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels_in)
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.shortcut = (
            nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False)
            if stride != 1 or channels_in != channels_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.relu(self.norm1(x))
        # A projection sees the activated input; an identity passes x itself.
        shortcut = x if isinstance(self.shortcut, nn.Identity) else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(self.dropout(nn.functional.relu(self.norm2(out))))
        return out + shortcut


class WideResNet(nn.Module):
    """WRN-depth-width (Zagoruyko and Komodakis 2016): three groups of (depth − 4) / 6 blocks,
    16·width, 32·width and 64·width channels; 28×28 → 28 → 14 → 7, then average pooling."""

    def __init__(
        self, depth: int = 16, width: int = 4, num_classes: int = 10, dropout: float = 0.0
    ) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n + 4 (10, 16, 22, 28), not {depth}")
        blocks = (depth - 4) // 6
        channels = [16, 16 * width, 32 * width, 64 * width]
        layers: list[nn.Module] = [nn.Conv2d(1, channels[0], 3, padding=1, bias=False)]
        for group, stride in enumerate((1, 2, 2)):
            for index in range(blocks):
                layers.append(
                    BasicBlock(
                        channels[group] if index == 0 else channels[group + 1],
                        channels[group + 1],
                        stride if index == 0 else 1,
                        dropout,
                    )
                )
        layers += [nn.BatchNorm2d(channels[3]), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels[3], num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def fashion_mnist(root: Path, *, train: bool) -> datasets.FashionMNIST:
    """torchvision's FashionMNIST from <root>/FashionMNIST/raw/ (download it on a login node)."""
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    return datasets.FashionMNIST(str(root), train=train, download=False, transform=transform)


def batchnorm_report(model: nn.Module) -> str:
    """Whose statistics the BatchNorm layers use, for the log: SyncBatchNorm layers average
    them over all ranks (on GPUs); plain ones, where st.wrap could not convert them (the CPU),
    use each rank's slice of the batch."""
    layers = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.SyncBatchNorm))]
    if all(isinstance(layer, nn.SyncBatchNorm) for layer in layers):
        return f"{len(layers)} SyncBatchNorm layers (statistics over all ranks)"
    return f"{len(layers)} BatchNorm layers with statistics per rank (SyncBatchNorm needs a GPU)"


@torch.no_grad()
def evaluate(model: nn.Module, loader: torch.utils.data.DataLoader, device: torch.device) -> float:
    """Accuracy over the whole test set: each rank counts its shard, then counts are summed."""
    model.eval()
    correct = seen = 0
    for images, labels in loader:
        predictions = model(images.to(device, non_blocking=True)).argmax(dim=1)
        correct += int((predictions == labels.to(device, non_blocking=True)).sum())
        seen += len(labels)
    model.train()
    return st.total(correct) / st.total(seen)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="WideResNet on FashionMNIST with scaletrain.")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument(
        "--create-small-data",
        action="store_true",
        help="write a small real stand-in (scikit-learn digits, FashionMNIST's format)",
    )
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128, help="global, over all processes")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-checkpoints", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    env = st.init()
    st.seed_everything(args.seed)
    # Rank 0 writes (or would download) the data first; the others wait, then read it.
    with st.rank_zero_first():
        if args.create_small_data and not (args.data_dir / "FashionMNIST" / "raw").is_dir():
            sys.path.append(str(Path(__file__).resolve().parents[1] / "mnist"))
            from make_small_mnist import write_small_mnist

            write_small_mnist(args.data_dir, dataset="FashionMNIST")
        train_set = fashion_mnist(args.data_dir, train=True)
        test_set = fashion_mnist(args.data_dir, train=False)

    # SyncBatchNorm: statistics over the global batch, not each GPU's slice of it.
    model = st.wrap(WideResNet(args.depth, args.width), sync_batchnorm_layers=True)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4
    )
    train_loader = st.loader(train_set, global_batch_size=args.batch_size, seed=args.seed)
    test_loader = st.eval_loader(test_set, global_batch_size=256)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs * len(train_loader)
    )
    st.print0(
        f"WRN-{args.depth}-{args.width}: {sum(p.numel() for p in model.parameters()):,} "
        f"parameters, {batchnorm_report(model)}; {len(train_set)} training images, "
        f"{len(train_loader)} steps per epoch"
    )
    ckpt = st.Checkpointer(
        model=model, optimizer=optimizer, scheduler=scheduler, enabled=not args.no_checkpoints
    )
    progress = st.Progress(
        args.epochs * len(train_loader), samples_per_step=args.batch_size, start_step=ckpt.step
    )
    for epoch in ckpt.epochs(args.epochs):
        for images, labels in ckpt.batches(train_loader):
            loss = nn.functional.cross_entropy(
                model(images.to(env.device, non_blocking=True)),
                labels.to(env.device, non_blocking=True),
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            progress.update(epoch=epoch, loss=loss)
        st.print0(f"epoch {epoch}: test accuracy {evaluate(model, test_loader, env.device):.1%}")
    progress.finish(test_accuracy=evaluate(model, test_loader, env.device))
    st.shutdown()


if __name__ == "__main__":
    main()
