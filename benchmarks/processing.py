"""Person crops and heatmap decoding: ours against transformers' Sapiens2ImageProcessor, same inputs, CPU; and the
blurred matting background against the pooling version it replaced.

Run: `python -m benchmarks.processing` (needs the dev extra for transformers).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.common import median_seconds, print_table
from sapiens2_stream.processing import crop_persons, decode_heatmaps
from sapiens2_stream.processing.dense import box_blur_background

BOXES = [[[100.0, 50, 200, 500], [500, 100, 300, 600], [900, 200, 150, 300]]] * 2


def frames(n: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8) for _ in range(n)]


def peaked_heatmaps(n: int, k: int = 308, h: int = 256, w: int = 192) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    cx, cy = torch.rand(n, k, generator=g) * (w - 1), torch.rand(n, k, generator=g) * (h - 1)
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    return torch.exp(-((xx - cx[..., None, None]) ** 2 + (yy - cy[..., None, None]) ** 2) / 8)


def pooled_blur(frame: torch.Tensor, k: int = 31) -> torch.Tensor:
    """The first blurred background: the same two box passes per axis as k-wide average pooling."""
    x = frame[None]
    for _ in range(2):
        x = F.avg_pool2d(F.pad(x, (k // 2, k // 2, 0, 0), mode="replicate"), (1, k), stride=1)
        x = F.avg_pool2d(F.pad(x, (0, 0, k // 2, k // 2), mode="replicate"), (k, 1), stride=1)
    return x[0]


def run(repeats: int = 3) -> list[dict]:
    from transformers import Sapiens2ImageProcessor

    processor = Sapiens2ImageProcessor()
    images = frames()
    n = sum(len(b) for b in BOXES)
    heatmaps = peaked_heatmaps(n)
    flat = [b for image_boxes in BOXES for b in image_boxes]
    outputs = SimpleNamespace(heatmaps=heatmaps)
    frame = torch.from_numpy(images[0]).permute(2, 0, 1).float() / 255
    return [
        dict(
            name=f"crops: {n} people from {len(images)} 720p frames",
            ours_s=median_seconds(lambda: crop_persons(images, BOXES), repeats),
            baseline="Sapiens2ImageProcessor(images, boxes=...)",
            baseline_s=median_seconds(lambda: processor(images, boxes=BOXES, return_tensors="pt"), repeats),
        ),
        dict(
            name=f"decode: {n} people x 308 heatmaps 256x192",
            ours_s=median_seconds(lambda: decode_heatmaps(heatmaps, flat), repeats),
            baseline="post_process_pose_estimation",
            baseline_s=median_seconds(lambda: processor.post_process_pose_estimation(outputs, BOXES), repeats),
        ),
        dict(
            name="blurred matting background, one 720p frame",
            ours_s=median_seconds(lambda: box_blur_background(frame), repeats),
            baseline="the same blur as k-wide average pooling (our first version)",
            baseline_s=median_seconds(lambda: pooled_blur(frame), repeats),
        ),
    ]


if __name__ == "__main__":
    print_table(run())
