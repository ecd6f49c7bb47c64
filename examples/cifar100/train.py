"""Train an EfficientNetV2 with an auxiliary classifier on CIFAR-100 — CaSToRC's multi-GPU
example (seed 002) with scaletrain: torchvision's CIFAR100 class and EfficientNetV2, a second
classifier on an intermediate stage whose loss is added with weight 0.3, and every metric
over all ranks.

    scaletrain run --nproc 2 examples/cifar100/train.py --data-dir .cache/cifar100 \\
        --create-small-data --model tiny
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision import datasets, models, transforms
from torchvision.models.efficientnet import EfficientNet, FusedMBConvConfig, MBConvConfig

import scaletrain as st

# CIFAR-100's per-channel mean and standard deviation.
MEAN, STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
AUX_WEIGHT = 0.3  # the seed's weight of the auxiliary classifier
BACKBONES = {
    "v2_s": models.efficientnet_v2_s,  # 20 M parameters
    "v2_m": models.efficientnet_v2_m,
    "v2_l": models.efficientnet_v2_l,  # the seed's choice: 117 M
}


def tiny_efficientnet(num_classes: int) -> EfficientNet:
    """EfficientNetV2's building blocks, three small stages: tests and laptops (~0.2 M)."""
    stages = [
        FusedMBConvConfig(1, 3, 1, 16, 16, 1),
        FusedMBConvConfig(4, 3, 2, 16, 32, 2),
        MBConvConfig(4, 3, 2, 32, 64, 2),
    ]
    return EfficientNet(stages, dropout=0.2, last_channel=256, num_classes=num_classes)


class EfficientNetWithAux(nn.Module):
    """A backbone with a second classifier on the output of an intermediate stage.

    In training the model returns both outputs; the auxiliary loss gives the early stages a
    gradient of their own. In evaluation it returns the main output only.
    """

    def __init__(self, backbone: EfficientNet, num_classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        stages = len(backbone.features)
        self.aux_after = stages * 2 // 3  # after two thirds of the stages
        with torch.no_grad():
            probe = backbone.features[: self.aux_after + 1](torch.zeros(1, 3, 32, 32))
        self.aux_classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
            nn.Linear(probe.shape[1], num_classes),
        )  # fmt: skip

    def forward(self, images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, aux_features = images, images
        for index, stage in enumerate(self.backbone.features):
            x = stage(x)
            if index == self.aux_after:
                aux_features = x
        main = self.backbone.classifier(torch.flatten(self.backbone.avgpool(x), 1))
        return (main, self.aux_classifier(aux_features)) if self.training else main


class StandInCIFAR100(datasets.CIFAR100):
    """torchvision's CIFAR100 reading the stand-in, checked against the stand-in's own MD5
    sums instead of CIFAR's. A class of the module, not one made at run time: DataLoader
    workers receive the data set pickled, which names its class."""

    def __init__(self, root: str, sums: dict[str, str], **options: Any) -> None:
        self.train_list = [["train", sums["train"]]]
        self.test_list = [["test", sums["test"]]]
        self.meta = {**datasets.CIFAR100.meta, "md5": sums["meta"]}
        super().__init__(root, **options)


def cifar100(root: Path, *, train: bool) -> datasets.CIFAR100:
    """torchvision's CIFAR100 from <root>/cifar-100-python/ (download it on a login node)."""
    augment = [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
    transform = transforms.Compose(
        [*(augment if train else []), transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    )
    sums_file = root / "cifar-100-python" / "stand-in-md5.json"
    if sums_file.is_file():
        sums = json.loads(sums_file.read_text())
        return StandInCIFAR100(str(root), sums, train=train, download=False, transform=transform)
    return datasets.CIFAR100(str(root), train=train, download=False, transform=transform)


@torch.no_grad()
def evaluate(model: nn.Module, loader: torch.utils.data.DataLoader, device: torch.device) -> float:
    """Top-1 accuracy over the whole test set, counted on every rank and summed."""
    model.eval()
    correct = seen = 0
    for images, labels in loader:
        predictions = model(images.to(device, non_blocking=True)).argmax(dim=1)
        correct += int((predictions == labels.to(device, non_blocking=True)).sum())
        seen += len(labels)
    model.train()
    return st.total(correct) / st.total(seen)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="EfficientNetV2 on CIFAR-100 with scaletrain.")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument(
        "--create-small-data",
        action="store_true",
        help="write a small real stand-in (patches of two photographs, CIFAR-100's format)",
    )
    parser.add_argument("--model", choices=["tiny", *BACKBONES], default="v2_s")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128, help="global, over all processes")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-checkpoints", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    env = st.init()
    st.seed_everything(args.seed)
    with st.rank_zero_first():  # rank 0 prepares (or downloads) the data, the others wait
        if args.create_small_data and not (args.data_dir / "cifar-100-python").is_dir():
            from make_small_cifar100 import write_small_cifar100

            write_small_cifar100(args.data_dir)
        train_set = cifar100(args.data_dir, train=True)
        test_set = cifar100(args.data_dir, train=False)

    classes = len(train_set.classes)
    backbone = (
        tiny_efficientnet(classes)
        if args.model == "tiny"
        else BACKBONES[args.model](num_classes=classes)
    )
    model = st.wrap(
        EfficientNetWithAux(backbone, classes), sync_batchnorm_layers=True, precision=args.precision
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    train_loader = st.loader(train_set, global_batch_size=args.batch_size, seed=args.seed)
    test_loader = st.eval_loader(test_set, global_batch_size=256)
    st.print0(
        f"EfficientNet {args.model} + auxiliary classifier: "
        f"{sum(p.numel() for p in model.parameters()):,} parameters; {len(train_set)} "
        f"training images in {classes} classes, {len(train_loader)} steps per epoch"
    )
    ckpt = st.Checkpointer(model=model, optimizer=optimizer, enabled=not args.no_checkpoints)
    progress = st.Progress(
        args.epochs * len(train_loader), samples_per_step=args.batch_size, start_step=ckpt.step
    )
    for epoch in ckpt.epochs(args.epochs):
        for images, labels in ckpt.batches(train_loader):
            labels = labels.to(env.device, non_blocking=True)
            main, aux = model(images.to(env.device, non_blocking=True))
            main_loss = nn.functional.cross_entropy(main, labels)
            loss = main_loss + AUX_WEIGHT * nn.functional.cross_entropy(aux, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            progress.update(epoch=epoch, loss=main_loss)
        st.print0(f"epoch {epoch}: test accuracy {evaluate(model, test_loader, env.device):.1%}")
    progress.finish(test_accuracy=evaluate(model, test_loader, env.device))
    st.shutdown()


if __name__ == "__main__":
    main()
