"""The dense stabiliser's cost per frame at 512x288 (the research's working size) for each kind, against a frame
interval at 30 frames/s: what share of a live frame's time it takes on one core.

Run: `python -m benchmarks.temporal` (a few seconds).
"""

from __future__ import annotations

import time

import cv2
import numpy as np
import torch

from sapiens2_stream.temporal import DenseStabilizer

W, H, FRAMES = 512, 288, 40


def values(kind: str, rng) -> np.ndarray:
    if kind == "alpha":
        return rng.random((H, W), dtype=np.float32)
    if kind == "seg":
        return rng.normal(0, 1, (29, H, W)).astype(np.float32)
    if kind == "normal":
        n = rng.normal(0, 1, (H, W, 3)).astype(np.float32)
        return n / np.linalg.norm(n, axis=-1, keepdims=True)
    return rng.random((H, W), dtype=np.float32) + 1.0


def run() -> list[dict]:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    rng = np.random.default_rng(0)
    texture = (cv2.GaussianBlur(rng.random((H, W + FRAMES * 4, 3)).astype(np.float32), (0, 0), 2) * 255)
    frames = [np.ascontiguousarray(texture[:, 4 * i : 4 * i + W].astype(np.uint8)) for i in range(FRAMES)]
    rows = []
    for kind in ("alpha", "seg", "normal", "depth"):
        stab = DenseStabilizer(kind)
        data = [values(kind, rng) for _ in range(FRAMES)]
        stab(frames[0], data[0])  # the first frame only stores its history
        start = time.perf_counter()
        for frame, value in zip(frames[1:], data[1:], strict=True):
            stab(frame, value)
        seconds = (time.perf_counter() - start) / (FRAMES - 1)
        rows.append(dict(name=f"stabilise {kind} (512x288, one core)", ours_s=seconds,
                         baseline="a frame interval at 30 fps", baseline_s=1 / 30))  # fmt: skip
    return rows


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
