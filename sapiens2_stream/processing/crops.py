"""Top-down person crops: boxes from one or many frames -> one normalised [N, 3, 1024, 768] batch.

UDP geometry (no rotation): output pixel (u, v) samples the frame at
`centre - size/2 + (u, v) * size / (out - 1)`. Shrinking crops use bilinear, enlarging crops bicubic,
as the original (cv2.warpAffine) and the reference do. The loop runs over frames, never over people: all
crops of a frame are sampled in at most two `grid_sample` calls against a stride-0 view of the frame.

The frame is normalised once, before sampling, and framed by a border of normalised black that
`padding_mode="border"` extends outwards: because sampling is linear this equals sampling the raw frame with
zero padding and normalising every crop afterwards (the reference's order), at a fraction of the memory traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import Sapiens2StreamError
from .geometry import BOX_PADDING, INPUT_SIZE, as_boxes, crop_windows, normalization
from .images import to_chw_float


@dataclass
class PersonCrops:
    """A batch of crops and what maps each one back to its frame."""

    pixel_values: torch.Tensor  # [N, 3, H, W], ImageNet-normalised
    boxes: torch.Tensor  # [N, 4] COCO xywh in frame pixels
    centres: torch.Tensor  # [N, 2] crop window centres (x, y)
    sizes: torch.Tensor  # [N, 2] crop window sizes (w, h)
    image_index: torch.Tensor  # [N] which input image each crop came from

    def __len__(self) -> int:
        return self.pixel_values.shape[0]


def sampling_grids(
    centres: torch.Tensor, sizes: torch.Tensor, frame_hw: tuple[int, int], input_size: tuple[int, int]
) -> torch.Tensor:
    """grid_sample grids [N, H, W, 2] (align_corners=True) for axis-aligned UDP crop windows."""
    out_h, out_w = input_size
    device = centres.device
    u = torch.arange(out_w, device=device, dtype=torch.float32)
    v = torch.arange(out_h, device=device, dtype=torch.float32)
    x0 = centres[:, 0:1] - sizes[:, 0:1] / 2
    y0 = centres[:, 1:2] - sizes[:, 1:2] / 2
    xs = x0 + u * (sizes[:, 0:1] / (out_w - 1))  # [N, W] frame pixels
    ys = y0 + v * (sizes[:, 1:2] / (out_h - 1))  # [N, H]
    gx = (2 * xs / (frame_hw[1] - 1) - 1)[:, None, :].expand(-1, out_h, -1)
    gy = (2 * ys / (frame_hw[0] - 1) - 1)[:, :, None].expand(-1, -1, out_w)
    return torch.stack([gx, gy], dim=-1)


BORDER = 2  # bicubic reaches two pixels out


def black_bordered(frame: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """The normalised [3, H, W] frame inside a BORDER-pixel frame of normalised black (raw 0)."""
    h, w = frame.shape[-2:]
    out = (-mean / std)[0].expand(3, h + 2 * BORDER, w + 2 * BORDER).clone()
    out[:, BORDER:-BORDER, BORDER:-BORDER] = (frame - mean[0]) / std[0]
    return out


def sample(frame: torch.Tensor, grids: torch.Tensor, mode: str) -> torch.Tensor:
    view = frame.unsqueeze(0).expand(grids.shape[0], -1, -1, -1)  # stride 0: no copy per crop
    return F.grid_sample(view, grids, mode=mode, padding_mode="border", align_corners=True)


def crop_persons(
    images: Sequence,
    boxes: Sequence,
    input_size: tuple[int, int] = INPUT_SIZE,
    device: torch.device | str | None = None,
    padding: float = BOX_PADDING,
    dtype: torch.dtype = torch.float32,
) -> PersonCrops:
    """Crop every box of every image into one batch.

    `images`: HxWx3 uint8 RGB frames (numpy or torch); `boxes`: one [n_i, 4] COCO xywh array per image.
    The batch lands on `device` (default: the first image's device) in `dtype`.
    """
    if len(images) != len(boxes):
        raise Sapiens2StreamError(f"got {len(images)} images but {len(boxes)} box lists; pass one box list per image")
    if device is None:
        device = images[0].device if images and isinstance(images[0], torch.Tensor) else "cpu"
    out_h, out_w = input_size
    mean, std = normalization(device)
    chunks, box_list, index = [], [], []
    for i, (image, image_boxes) in enumerate(zip(images, boxes, strict=True)):
        b = as_boxes(image_boxes, device)
        if len(b) == 0:
            continue
        frame = black_bordered(to_chw_float(image, device), mean, std)
        centres, sizes = crop_windows(b, input_size, padding)
        grids = sampling_grids(centres + BORDER, sizes, tuple(frame.shape[-2:]), input_size)
        shrink = torch.minimum((out_w - 1) / sizes[:, 0], (out_h - 1) / sizes[:, 1]) < 1.0
        modes = [(mask, mode) for mask, mode in ((shrink, "bilinear"), (~shrink, "bicubic")) if mask.any()]
        if len(modes) == 1:
            out = sample(frame, grids, modes[0][1])
        else:
            out = torch.empty(len(b), 3, out_h, out_w, device=frame.device)
            for mask, mode in modes:
                out[mask] = sample(frame, grids[mask], mode)
        chunks.append(out)
        box_list.append(b)
        index.append(torch.full((len(b),), i, dtype=torch.long, device=frame.device))
    if not chunks:
        empty = torch.empty(0, 3, out_h, out_w, device=device, dtype=dtype)
        z = torch.empty(0, 2, device=device)
        return PersonCrops(empty, torch.empty(0, 4, device=device), z, z, torch.empty(0, dtype=torch.long))
    pixels = (torch.cat(chunks) if len(chunks) > 1 else chunks[0]).to(dtype)
    all_boxes = torch.cat(box_list)
    centres, sizes = crop_windows(all_boxes, input_size, padding)
    return PersonCrops(pixels, all_boxes, centres, sizes, torch.cat(index))
