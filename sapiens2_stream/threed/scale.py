"""The pointmap's scale from frame to frame, read off the scene that does not move.

Sapiens2 predicts a pointmap in canonical units times one metric scale per frame, and that scale wobbles over a
video (a few per cent: the upstream maintainers' own warning). For a camera that stands still, the floor and the
walls are where they were: the median ratio of this frame's depths to the scene's reference depths, over the
pixels that show no person, is the frame's scale against the reference, measured on thousands of pixels. The
reference is the scene's depth on a coarse grid, averaged over the frames so that it settles on the run's mean scale
(evenly over the first `SETTLE` frames, then as a slow running mean that follows slow changes: a door, a parked
car).

When the camera moves, or too little background shows, the ratios disagree and `update` says so (None): the
lifter falls back on each person's bone lengths.
"""

from __future__ import annotations

import numpy as np

GRID = 8  # every 8th pixel
MIN_PIXELS = 200  # background pixels that must agree
MAX_SPREAD = 0.03  # the ratios' median absolute deviation above which the background is not one steady scene
SETTLE = 30  # frames averaged evenly into the reference before it becomes a slow running mean
FOLLOW = 0.02  # the running mean's weight for each new frame after that


class FrameScale:
    def __init__(self) -> None:
        self.reference: np.ndarray | None = None
        self.frames = 0

    def reset(self) -> None:
        self.reference, self.frames = None, 0

    def update(self, pointmap: np.ndarray, people: np.ndarray) -> float | None:
        """This frame's scale against the reference (divide its depths by it), or None. `people` [H, W] bool marks
        the pixels that show people (excluded: they move)."""
        depth = pointmap[::GRID, ::GRID, 2].astype(np.float64)
        background = ~people[::GRID, ::GRID] & np.isfinite(depth) & (depth > 0)
        if self.reference is None or self.reference.shape != depth.shape:
            self.reference, self.frames = np.full(depth.shape, np.nan), 0
        known = background & np.isfinite(self.reference)
        scale = None
        if known.sum() >= MIN_PIXELS:
            ratio = depth[known] / self.reference[known]
            middle = float(np.median(ratio))
            if np.median(np.abs(ratio - middle)) <= MAX_SPREAD * middle:
                scale = middle
        if scale is not None or not known.any():  # a steady frame (or the first): it joins the reference
            self._learn(depth, background)
        return scale

    def _learn(self, depth: np.ndarray, background: np.ndarray) -> None:
        self.frames += 1
        weight = max(1.0 / self.frames, FOLLOW) if self.frames > 1 else 1.0
        new = background & ~np.isfinite(self.reference)
        self.reference[new] = depth[new]
        old = background & ~new
        self.reference[old] += weight * (depth[old] - self.reference[old])
