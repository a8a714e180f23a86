"""Frames in: numpy or torch HxWx3 uint8 RGB (also grayscale, RGBA and 16-bit) -> float CHW tensors on a device."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import Sapiens2StreamError


def to_chw_float(image, device: torch.device | str | None = None) -> torch.Tensor:
    """One image as a float32 [3, H, W] tensor on the 0-255 scale.

    Grayscale is repeated to three channels, alpha is dropped, and 16-bit input is rescaled to 0-255, so
    unusual frames are converted rather than rejected. Host tensors are pinned for an asynchronous copy to CUDA.
    """
    t = image if isinstance(image, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(image))
    if t.dim() == 2:
        t = t[..., None]
    if t.dim() != 3 or t.shape[-1] not in (1, 3, 4) or 0 in t.shape:
        raise Sapiens2StreamError(f"expected an HxWx3 RGB image, got shape {tuple(t.shape)}")
    scale = 255.0 / 65535.0 if t.dtype in (torch.uint16, torch.int32) or (t.dtype == torch.int16) else 1.0
    target = torch.device(device) if device is not None else t.device
    if target.type == "cuda" and t.device.type == "cpu":
        t = t.pin_memory().to(target, non_blocking=True)
    else:
        t = t.to(target)
    t = t[..., :3].permute(2, 0, 1).float()
    if scale != 1.0:
        t = t * scale
    return t.expand(3, -1, -1) if t.shape[0] == 1 else t
