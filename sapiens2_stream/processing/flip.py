"""Flip test-time augmentation: mirrored inputs ride in the same batch, outputs are mirrored back and averaged.

One forward of 2N instead of two forwards of N. Mirroring back is task-specific: pose swaps left/right
keypoint channels, seg swaps left/right class channels, normals and pointmaps negate their x component.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def with_flipped(pixel_values: torch.Tensor) -> torch.Tensor:
    """[N, ...] -> [2N, ...]: the originals followed by their horizontal mirrors."""
    return torch.cat([pixel_values, pixel_values.flip(-1)])


def split_flipped(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = batch.shape[0] // 2
    return batch[:n], batch[n:]


def unflip_channels(mirrored: torch.Tensor, channel_order: Sequence[int] | None = None) -> torch.Tensor:
    """Mirror a [N, C, H, W] output back along W and reorder its channels (left <-> right)."""
    out = mirrored.flip(-1)
    return out[:, list(channel_order)] if channel_order is not None else out


def unflip_vectors(mirrored: torch.Tensor) -> torch.Tensor:
    """Mirror back a [N, 3, H, W] vector field (normals, pointmaps) whose x component changes sign."""
    out = mirrored.flip(-1).clone()
    out[:, 0] = -out[:, 0]
    return out


def merge_flip(batch: torch.Tensor, kind: str, channel_order: Sequence[int] | None = None) -> torch.Tensor:
    """Average a [2N, ...] output of `with_flipped` inputs into [N, ...].

    `kind`: "channels" (heatmaps, logits, mattes; `channel_order` swaps left/right), "vectors" (normals,
    pointmaps) or "scalar" (per-image values such as pointmap scales, which a mirror leaves unchanged).
    """
    original, mirrored = split_flipped(batch)
    if kind == "channels":
        back = unflip_channels(mirrored, channel_order)
    elif kind == "vectors":
        back = unflip_vectors(mirrored)
    elif kind == "scalar":
        back = mirrored
    else:
        raise ValueError(f"unknown flip kind {kind!r}")
    return (original + back) / 2
