# Stands for the LUMI AI guide's resources/hdf5_dataset.py, the helper its training scripts
# import through sys.path: its HDF5Dataset reads the guide's train_images.hdf5 with h5py and
# is used as `with HDF5Dataset(path, transform=...) as dataset:`. Neither h5py nor the images
# are here, so this one makes small random images, used the same way.
import torch
from torch.utils.data import Dataset


class SyntheticImageDataset(Dataset):
    """`size` random 3 × `image_size` × `image_size` images in `classes` classes."""

    def __init__(self, size=80, image_size=8, classes=2, transform=None):
        generator = torch.Generator().manual_seed(1)
        self.images = torch.rand(size, 3, image_size, image_size, generator=generator)
        self.labels = torch.randint(classes, (size,), generator=generator)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        return False
