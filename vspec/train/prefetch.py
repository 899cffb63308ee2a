"""What timm's prefetcher does on the device, for the training loop on CUDA (`--normalise-on device`): the loader's
workers hand over uint8 images (`build_transforms(on_device=True)`) and `DeviceNormalise` makes them the model's
input there."""

from __future__ import annotations

import torch

from .data import _mean_std


class DeviceNormalise:
    """A batch of uint8 images (from `build_transforms(on_device=True)`) on the device, as float32 normalised
    by mean / std (the same (x / 255 - mean) / std as ToTensor + Normalize), channels-last where asked; in
    training, random erasing with probability `re_prob` there too (timm's RandomErasing in the mode the workers'
    transform uses, create_transform's default: constant zeros in the normalised image)."""

    def __init__(self, in_chans: int, device: torch.device, *, re_prob: float = 0.0, channels_last: bool = False,
                 mean=None, std=None):
        mean, std = _mean_std(in_chans, mean, std)
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255
        self.device, self.channels_last = device, channels_last
        self.erase = None
        if re_prob > 0:
            from timm.data.random_erasing import RandomErasing  # extra

            self.erase = RandomErasing(re_prob, mode="const", device=device)

    def __call__(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        images = images.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        images = images.float().sub_(self.mean).div_(self.std)
        return self.erase(images) if train and self.erase is not None else images
