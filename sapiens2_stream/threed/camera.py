"""The camera behind a pointmap: its intrinsics, estimated from the pointmap itself when no calibration gives them.

A pointmap says, for every pixel (u, v), the 3-D point (x, y, z) the pixel sees, in the camera's frame (x right,
y down, z forward, metres). A pinhole camera projects it to u = f * x / z + cx, v = f * y / z + cy: linear in
(f, cx, cy), so one least-squares solve over the pixels gives the focal length and the principal point (square
pixels, no skew). Pixels that disagree (edges, where the model blends two depths) are dropped and the solve is
redone once. One frame's estimate wobbles with the model's own; `IntrinsicsEstimate` keeps the median of the
run's estimates, which is what the lifter uses and the summary reports.
"""

from __future__ import annotations

from collections import deque

import numpy as np

MIN_DEPTH_M = 0.05  # nearer than this, or not finite: no point (padding, sky, the model's blanks)


def estimate_intrinsics(pointmap: np.ndarray, step: int = 4) -> np.ndarray | None:
    """K (3x3) from one [H, W, 3] pointmap, on every `step`-th pixel; None when too few pixels have a point."""
    h, w = pointmap.shape[:2]
    v, u = np.mgrid[0:h:step, 0:w:step].astype(np.float64)
    points = pointmap[::step, ::step].astype(np.float64)
    z = points[..., 2]
    ok = np.isfinite(points).all(-1) & (z > MIN_DEPTH_M)
    if ok.sum() < 50:
        return None
    a, b = points[..., 0][ok] / z[ok], points[..., 1][ok] / z[ok]
    u, v = u[ok], v[ok]
    keep = np.ones(len(u), bool)
    for _ in range(2):  # solve, drop the pixels far off the fit (blended edges), solve again
        f, cx, cy = solve(a[keep], b[keep], u[keep], v[keep])
        residual = np.hypot(f * a + cx - u, f * b + cy - v)
        keep = residual <= max(2.0, 3 * np.median(residual))
    if not np.isfinite(f) or f <= 0:
        return None
    return intrinsics_matrix(f, cx, cy)


def solve(a: np.ndarray, b: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """Least squares for u = f a + cx, v = f b + cy (one f for both axes)."""
    n = len(a)
    design = np.zeros((2 * n, 3))
    design[:n, 0], design[:n, 1] = a, 1.0
    design[n:, 0], design[n:, 2] = b, 1.0
    (f, cx, cy), *_ = np.linalg.lstsq(design, np.concatenate([u, v]), rcond=None)
    return float(f), float(cx), float(cy)


def intrinsics_matrix(f: float, cx: float, cy: float) -> np.ndarray:
    return np.array([[f, 0.0, cx], [0.0, f, cy], [0.0, 0.0, 1.0]])


def rays(intrinsics: np.ndarray, pixels: np.ndarray) -> np.ndarray:
    """[..., 3] directions with z = 1 through [..., 2] pixels: a point at depth z on the pixel's ray is z * ray."""
    f_x, f_y, cx, cy = intrinsics[0, 0], intrinsics[1, 1], intrinsics[0, 2], intrinsics[1, 2]
    out = np.ones(pixels.shape[:-1] + (3,))
    out[..., 0] = (pixels[..., 0] - cx) / f_x
    out[..., 1] = (pixels[..., 1] - cy) / f_y
    return out


def project(intrinsics: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[..., 2] pixels of [..., 3] camera-frame points."""
    z = points[..., 2:3]
    return (points[..., :2] / z) * np.diag(intrinsics)[:2] + intrinsics[:2, 2]


class IntrinsicsEstimate:
    """The run's intrinsics: the median of the last `keep` per-frame estimates (focal length and principal point
    each), steady once a few frames are in, and following a zoom within `keep` frames."""

    def __init__(self, keep: int = 300) -> None:
        self.estimates: deque[np.ndarray] = deque(maxlen=keep)

    def update(self, pointmap: np.ndarray) -> np.ndarray | None:
        found = estimate_intrinsics(pointmap)
        if found is not None:
            self.estimates.append(np.array([found[0, 0], found[0, 2], found[1, 2]]))
        return self.current

    @property
    def current(self) -> np.ndarray | None:
        if not self.estimates:
            return None
        return intrinsics_matrix(*np.median(np.array(self.estimates), axis=0))
