"""Training targets: UDP Gaussian heatmaps for pose and nearest-neighbour label maps for seg."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .geometry import BOX_PADDING, INPUT_SIZE, as_boxes, crop_windows


def heatmap_targets(
    keypoints: torch.Tensor,
    boxes,
    input_size: tuple[int, int] = INPUT_SIZE,
    downscale: int = 4,
    sigma: float = 6.0,
    padding: float = BOX_PADDING,
) -> tuple[torch.Tensor, torch.Tensor]:
    """COCO-style keypoints [N, K, 3] (x, y, visibility; or [N, K, 2], all visible) in image pixels and their
    person boxes [N, 4] -> UDP Gaussian heatmaps [N, K, h, w] and per-keypoint weights [N, K].

    A target is an unnormalised Gaussian (peak 1) kept inside a window of radius 3 sigma; its weight is 1 when
    the keypoint is visible and the window touches the heatmap, else 0 (then the heatmap is all zero). The
    weights go straight into `pose_loss`. The Gaussian is separable, so it is built as an outer product.
    """
    kp = torch.as_tensor(keypoints, dtype=torch.float32)
    device = kp.device
    n, k = kp.shape[:2]
    h, w = input_size[0] // downscale, input_size[1] // downscale
    centres, sizes = crop_windows(as_boxes(boxes, device), input_size, padding)
    span = torch.tensor([w - 1, h - 1], dtype=torch.float32, device=device)
    mu = ((kp[..., :2] - centres[:, None]) / sizes[:, None] + 0.5) * span  # [N, K, 2] heatmap pixels
    visible = kp[..., 2] > 0 if kp.shape[-1] > 2 else torch.ones(n, k, dtype=torch.bool, device=device)
    heatmaps, inside = gaussian_heatmaps(mu, (h, w), sigma)
    weights = (visible & inside).float()
    return heatmaps * weights[..., None, None], weights


def gaussian_heatmaps(mu: torch.Tensor, size: tuple[int, int], sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussians (peak 1) at heatmap-pixel positions `mu` [N, K, 2] on an (h, w) grid, each cut to a window of
    radius 3 sigma, and whether that window touches the grid [N, K]."""
    h, w = size
    radius = int(sigma * 3)
    nearest = (mu + 0.5).to(torch.int64)  # truncation toward zero, as the original
    lo, hi = nearest - radius, nearest + radius + 1
    inside = (lo[..., 0] < w) & (lo[..., 1] < h) & (hi[..., 0] >= 0) & (hi[..., 1] >= 0)

    def axis(length: int, dim: int) -> torch.Tensor:
        grid = torch.arange(length, dtype=torch.float32, device=mu.device)
        g = torch.exp(-((grid - mu[..., dim, None]) ** 2) / (2 * sigma**2))
        window = (grid >= lo[..., dim, None]) & (grid < hi[..., dim, None])
        return g * window

    gx, gy = axis(w, 0), axis(h, 1)  # [N, K, w], [N, K, h]
    return gy[..., :, None] * gx[..., None, :], inside


def resize_labels(labels: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Resize integer label maps [B, H, W] with nearest neighbour, so no class id is ever invented."""
    resized = F.interpolate(labels[:, None].float(), size=size, mode="nearest-exact")
    return resized[:, 0].to(labels.dtype)
