"""Crop geometry shared by cropping, decoding and training targets: boxes -> padded, 3:4 crop windows."""

from __future__ import annotations

import numpy as np
import torch

INPUT_SIZE = (1024, 768)  # (height, width) the released models were trained at
BOX_PADDING = 1.25
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def as_boxes(boxes, device: torch.device | str | None = None) -> torch.Tensor:
    """Any [N, 4] array-like of COCO xywh boxes -> float32 tensor (on `device` if given)."""
    if isinstance(boxes, torch.Tensor):
        t = boxes.float()
    else:
        t = torch.as_tensor(np.asarray(boxes, dtype=np.float32).reshape(-1, 4))
    return t.reshape(-1, 4).to(device) if device is not None else t.reshape(-1, 4)


def crop_windows(
    boxes_xywh: torch.Tensor, input_size: tuple[int, int] = INPUT_SIZE, padding: float = BOX_PADDING
) -> tuple[torch.Tensor, torch.Tensor]:
    """(centres [N, 2], sizes [N, 2] as (w, h)) of the crop windows for COCO xywh boxes.

    The box grows by `padding`, then its short side grows until w/h equals the model input's aspect.
    Degenerate boxes are given at least one pixel so no window has zero area.
    """
    x, y, w, h = boxes_xywh.float().unbind(-1)
    w, h = w.clamp(min=1.0), h.clamp(min=1.0)
    centre = torch.stack([x + w / 2, y + h / 2], dim=-1)
    pw, ph = w * padding, h * padding
    aspect = input_size[1] / input_size[0]
    wide = pw > ph * aspect
    size = torch.stack([torch.where(wide, pw, ph * aspect), torch.where(wide, pw / aspect, ph)], dim=-1)
    return centre, size


def normalization(device: torch.device | str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    """ImageNet mean and std on the 0-255 scale, shaped [1, 3, 1, 1]."""
    mean = torch.tensor(IMAGENET_MEAN, device=device, dtype=dtype).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=device, dtype=dtype).view(1, 3, 1, 1) * 255
    return mean, std
