"""Heatmaps -> keypoints in image pixels: argmax, DARK refinement, UDP mapping back through the crop window.

Batched over people and keypoints, on the heatmaps' device. Scores are the raw heatmap peaks (they can
exceed 1).

DARK blurs each map (11x11 Gaussian, zero-padded), rescales it to keep its maximum, clamps to [1e-3, 50],
takes the log and makes one Newton step at the integer peak. Unlike the reference, the step may only refine:
where the Hessian is not negative definite (the peak is no maximum of the smoothed map: flat, clipped or
saddle-shaped neighbourhoods) the integer peak stays, and so it does where the step would leave its peak: more
than MAX_STEP on an axis, unless the map has a well-formed peak (rising above the median of its row and column by
at least CONTRAST of its value) and the step lands inside that peak's half-height extent along the row and the column
through the integer peak. A wide, low peak whose argmax noise moved more than a pixel from its centre is refined
as the reference refines it; the reference's step on a degenerate map divides by a near-zero determinant and can
throw a keypoint tens of thousands of pixels off the picture, with the result decided by float rounding (another
CPU, another thread count).

Only the 3x3 neighbourhood of the peak enters the Newton step, and the max-rescale only matters through the
clamp (log turns it into a constant that the derivatives drop). So for every map whose peak lies in (0, 50] and
whose blurred neighbourhood stays above 1e-3 (then the clamp provably never bites), the blur is evaluated on a
13x13 patch only; the remaining maps take the full-map path. Both give the same result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .geometry import BOX_PADDING, INPUT_SIZE, as_boxes, crop_windows

DARK_KERNEL = 11
LOG_MIN, LOG_MAX = 1e-3, 50.0
MAX_STEP = 1.0  # heatmap pixels per axis: a clean peak's centre lies within half a pixel of the integer one
CONTRAST = 0.1  # a peak is well-formed when it rises above its row's and column's median by this share of its value


def gaussian_kernel_1d(kernel: int, device: torch.device) -> torch.Tensor:
    """OpenCV's automatic sigma for a kernel size: 0.3 * ((k - 1) / 2 - 1) + 0.8."""
    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    x = torch.arange(kernel, device=device, dtype=torch.float32) - (kernel - 1) / 2
    k = torch.exp(-(x**2) / (2 * sigma**2))
    return k / k.sum()


def blur_keep_max(maps: torch.Tensor, kernel: int = DARK_KERNEL) -> torch.Tensor:
    """Zero-padded Gaussian blur of [M, h, w] maps, rescaled so each map keeps its original maximum."""
    m, h, w = maps.shape
    k = gaussian_kernel_1d(kernel, maps.device)
    pad = kernel // 2
    x = maps.reshape(1, m, h, w)  # maps as channels of one depthwise convolution: far faster than a batch of M
    x = F.conv2d(x, k.view(1, 1, 1, kernel).expand(m, 1, 1, kernel), padding=(0, pad), groups=m)
    x = F.conv2d(x, k.view(1, 1, kernel, 1).expand(m, 1, kernel, 1), padding=(pad, 0), groups=m).reshape(m, h, w)
    before, after = maps.amax(dim=(1, 2)), x.amax(dim=(1, 2))
    positive = after > 0
    scale = torch.where(positive, before / torch.where(positive, after, torch.ones_like(after)), 1.0)
    return x * scale[:, None, None]


def neighbourhood_index(x: torch.Tensor, y: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Flat indices [M, 3, 3] of the 3x3 neighbourhood of (x, y), edges replicated (clamped)."""
    d = torch.arange(-1, 2, device=x.device)
    ys = (y[:, None] + d).clamp(0, h - 1)
    xs = (x[:, None] + d).clamp(0, w - 1)
    return ys[:, :, None] * w + xs[:, None, :]


def local_blur(maps: torch.Tensor, x: torch.Tensor, y: torch.Tensor, kernel: int = DARK_KERNEL) -> torch.Tensor:
    """The zero-padded blur of [M, h, w] maps at the (edge-replicated) 3x3 neighbourhood of (x, y): [M, 3, 3]."""
    m, h, w = maps.shape
    r = kernel // 2 + 1
    d = torch.arange(-r, r + 1, device=maps.device)
    ys, xs = y[:, None] + d, x[:, None] + d  # [M, 2r+1]
    inside = ((ys >= 0) & (ys < h))[:, :, None] & ((xs >= 0) & (xs < w))[:, None, :]
    idx = ys.clamp(0, h - 1)[:, :, None] * w + xs.clamp(0, w - 1)[:, None, :]
    patch = maps.reshape(m, -1).gather(1, idx.reshape(m, -1)).reshape(idx.shape) * inside
    k = gaussian_kernel_1d(kernel, maps.device)
    rows = patch.unfold(2, kernel, 1) @ k  # [M, 2r+1, 3]: blurred along x
    grid = rows.unfold(1, kernel, 1) @ k  # [M, 3, 3]: then along y
    # Replicate the edge like a 1-pixel replicate pad: a neighbour past the border takes the border value.
    step = torch.arange(-1, 2, device=maps.device)
    cols = (x[:, None] + step).clamp(0, w - 1) - (x[:, None] - 1)
    rows_i = (y[:, None] + step).clamp(0, h - 1) - (y[:, None] - 1)
    grid = grid.gather(2, cols[:, None, :].expand(-1, 3, -1))
    return grid.gather(1, rows_i[:, :, None].expand(-1, -1, 3))


def newton_steps(logs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One Newton step [M, 2] (dx, dy) from the 3x3 log-heatmap neighbourhoods [M, 3, 3] of the peaks, and whether
    the neighbourhood is a maximum (Hessian negative definite) with a finite step [M]."""
    c = logs[:, 1, 1]
    xp, xm, yp, ym = logs[:, 1, 2], logs[:, 1, 0], logs[:, 2, 1], logs[:, 0, 1]
    pp, mm = logs[:, 2, 2], logs[:, 0, 0]
    gx, gy = (xp - xm) / 2, (yp - ym) / 2
    eps = torch.finfo(torch.float32).eps
    hxx, hyy = xp - 2 * c + xm + eps, yp - 2 * c + ym + eps
    hxy = (pp - xp - yp + 2 * c - xm - ym + mm) / 2
    det = hxx * hyy - hxy * hxy
    step = torch.stack([(hyy * gx - hxy * gy) / det, (hxx * gy - hxy * gx) / det], dim=-1)
    maximum = (hxx < 0) & (det > 0) & torch.isfinite(step).all(-1)
    return step, maximum


def half_height_extent(maps: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each map's peak at integer (x, y) ends: along its row and its column, the nearest pixels on either side
    below half its height above the median of that row and column ([M, 2] low and high, x then y; half a pixel past
    the border where the peak reaches it), and whether the peak is well-formed (rises above that median by CONTRAST
    of its value)."""
    m, h, w = maps.shape
    rows, cols = maps[torch.arange(m), y], maps[torch.arange(m), :, x]  # [M, w], [M, h]
    peak = rows.gather(1, x[:, None])[:, 0]
    floor = torch.cat([rows, cols], 1).median(dim=1).values  # the peak's surroundings, without sorting whole maps
    level = (peak + floor) / 2
    low, high = [], []
    for line, at, size in ((rows, x, w), (cols, y, h)):
        index = torch.arange(size, device=maps.device, dtype=torch.float32).expand(m, -1)
        below = line < level[:, None]
        low.append(torch.where(below & (index < at[:, None]), index, -0.5).amax(1))
        high.append(torch.where(below & (index > at[:, None]), index, size - 0.5).amin(1))
    well_formed = peak - floor >= CONTRAST * peak.abs()
    return torch.stack(low, -1), torch.stack(high, -1), well_formed & (peak > floor)


def newton_offsets(logs: torch.Tensor, maps: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The refining offsets [M, 2] (subtracted from the integer peaks): the Newton step where it is a maximum and
    stays within MAX_STEP, or lands inside a well-formed peak's half-height extent; zero elsewhere."""
    step, maximum = newton_steps(logs)
    ok = maximum & (step.abs() <= MAX_STEP).all(-1)
    wide = (maximum & ~ok).nonzero().squeeze(1)  # beyond one pixel: only inside the peak it belongs to
    if len(wide):
        low, high, well_formed = half_height_extent(maps[wide], x[wide], y[wide])
        landing = torch.stack([x[wide], y[wide]], -1).float() - step[wide]
        ok[wide] = well_formed & ((landing > low) & (landing < high)).all(-1)
    return torch.where(ok[:, None], step, 0.0)


def dark_refine(
    heatmaps: torch.Tensor, flat_index: torch.Tensor, peaks: torch.Tensor, kernel: int = DARK_KERNEL
) -> torch.Tensor:
    """Sub-pixel peak locations [N, K, 2] in heatmap pixels, within MAX_STEP of the integer peak on each axis or
    inside its well-formed peak; peaks that are not positive stay at -1."""
    n, k, h, w = heatmaps.shape
    maps = heatmaps.reshape(n * k, h, w)
    flat, peak = flat_index.reshape(-1), peaks.reshape(-1)
    x, y = flat % w, flat // w
    logs = local_blur(maps, x, y, kernel)
    fast = (peak > 0) & (peak <= LOG_MAX) & (logs.amin(dim=(1, 2)) >= LOG_MIN)
    logs = logs.clamp(LOG_MIN, LOG_MAX).log()
    slow = (~fast & (peak > 0)).nonzero().squeeze(1)
    if len(slow):
        blurred = blur_keep_max(maps[slow], kernel).clamp(LOG_MIN, LOG_MAX).log()
        idx = neighbourhood_index(x[slow], y[slow], h, w)
        logs[slow] = blurred.reshape(len(slow), -1).gather(1, idx.reshape(len(slow), -1)).reshape(-1, 3, 3)
    xy = torch.stack([x, y], dim=-1).float()
    offsets = newton_offsets(logs, maps, x, y)
    refined = torch.where((peak > 0)[:, None], xy - offsets, torch.full_like(xy, -1.0))
    return refined.reshape(n, k, 2)


def decode_heatmaps(
    heatmaps: torch.Tensor,
    boxes,
    input_size: tuple[int, int] = INPUT_SIZE,
    padding: float = BOX_PADDING,
    kernel: int = DARK_KERNEL,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K, h, w] heatmaps and [N, 4] COCO xywh boxes -> keypoints [N, K, 2] in image pixels, scores [N, K].

    `input_size` is the (height, width) of the crops the heatmaps came from.
    """
    hm = heatmaps.float()
    n, k, h, w = hm.shape
    if n == 0:
        return hm.new_zeros(0, k, 2), hm.new_zeros(0, k)
    scores, flat_index = hm.reshape(n, k, -1).max(dim=-1)
    refined = dark_refine(hm, flat_index, scores, kernel)
    centres, sizes = crop_windows(as_boxes(boxes, hm.device), input_size, padding)
    span = torch.tensor([w - 1, h - 1], device=hm.device, dtype=torch.float32)
    keypoints = refined / span * sizes[:, None] + centres[:, None] - sizes[:, None] / 2
    return keypoints, scores
