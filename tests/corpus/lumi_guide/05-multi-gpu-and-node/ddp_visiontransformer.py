# The LUMI AI guide's 05-multi-gpu-and-node/ddp_visiontransformer.py, small: it finds its own
# helper package `resources` through sys.path (the folder above its own), picks its GPU with
# torch.cuda.set_device(LOCAL_RANK) and reads RANK, so that torchrun (run_ddp_torchrun.sh) or
# srun with RANK and LOCAL_RANK exported in each task (run_ddp_srun.sh) can start it. A
# vision transformer of one tiny layer on 8 × 8 images instead of vit_b_16 on ImageNet.
#
# Here CPU processes stand in for GPUs (gloo). For the tests each rank prints one line and
# writes $PROBE_DIR/rank-<N>.json.
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision.transforms as transforms
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, random_split
from torch.utils.data.distributed import DistributedSampler
from torchvision.models import VisionTransformer

sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))  # noqa: PTH100, PTH118, PTH120
from resources.synthetic_dataset import SyntheticImageDataset


def train_model(model, criterion, optimizer, train_loader, val_loader, epochs, rank):
    # note that "cuda" is used as a general reference to GPUs,
    # even when running on AMD GPUs that use ROCm
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)

    if rank == 0:
        start = time.time()

    for epoch in range(epochs):
        model.train()
        running_loss = 0.0
        for images, labels in train_loader:
            images, labels = images.to(device), labels.to(device)

            optimizer.zero_grad()
            outputs = model(images)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()

            running_loss += loss.item()

        if rank == 0:
            print(f"Epoch {epoch + 1}, Training Loss: {running_loss / len(train_loader)}")

        # Validation step, note that only results from rank 0 are used here.
        model.eval()
        correct = 0
        total = 0
        with torch.no_grad():
            for images, labels in val_loader:
                images, labels = images.to(device), labels.to(device)
                outputs = model(images)
                _, predicted = torch.max(outputs, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()

        if rank == 0:
            print(f"Validation Accuracy: {100 * correct / total}%")

    if rank == 0:
        print(f"Time elapsed (s): {time.time() - start}")
    return loss.item()


if __name__ == "__main__":
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")

    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    rank = int(os.environ["RANK"])

    # Define transformations
    transform = transforms.Compose(
        [transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]
    )

    model = VisionTransformer(
        image_size=8,
        patch_size=4,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        mlp_dim=16,
        num_classes=2,
    )
    if torch.cuda.is_available():
        model = model.to(local_rank)
        model = DistributedDataParallel(model, device_ids=[local_rank])
    else:
        model = DistributedDataParallel(model)

    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    with SyntheticImageDataset(transform=transform) as full_train_dataset:
        # Splitting the dataset into train and validation sets
        train_size = int(0.8 * len(full_train_dataset))
        val_size = len(full_train_dataset) - train_size
        train_dataset, val_dataset = random_split(full_train_dataset, [train_size, val_size])

        train_sampler = DistributedSampler(train_dataset)
        train_loader = DataLoader(train_dataset, sampler=train_sampler, batch_size=8, num_workers=1)

        val_sampler = DistributedSampler(val_dataset)
        val_loader = DataLoader(val_dataset, sampler=val_sampler, batch_size=8, num_workers=1)

        loss = train_model(
            model, criterion, optimizer, train_loader, val_loader, epochs=1, rank=rank
        )

        world_size = dist.get_world_size()
        host = socket.gethostname()
        line = f"rank {rank}/{world_size} local {local_rank} on {host}: loss {loss:.4f}"
        print(line)
        weights = model.module.heads.head.weight.flatten().tolist()
        report = {
            "rank": rank,
            "world_size": world_size,
            "local_rank": local_rank,
            "line": line,
            "host": host,
            "weights": weights,
        }
        Path(os.environ["PROBE_DIR"], f"rank-{rank}.json").write_text(
            json.dumps(report), encoding="utf-8"
        )
        dist.barrier()
        dist.destroy_process_group()
