"""The detector interface and the two detectors that need no model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Detector:
    """Finds people. Boxes are COCO xywh float32 in frame pixels, with a score column."""

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def detect_frames(self, frames: Sequence, sources: Sequence[str] = ()) -> list[np.ndarray]:
        """Boxes for source frames (`io.sources.Frame`: their pictures, and their numbers for detectors that
        need them); `sources`: each frame's source uri, for detectors that read each camera's own file."""
        return self.detect([f.rgb for f in frames])


class FixedBoxes(Detector):
    """The same boxes in every frame (a fixed camera framing people, or tests), clipped to the frame."""

    def __init__(self, boxes: np.ndarray) -> None:
        self.boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = []
        for frame in frames:
            h, w = frame.shape[:2]
            x0 = np.clip(self.boxes[:, 0], 0, w)
            y0 = np.clip(self.boxes[:, 1], 0, h)
            x1 = np.clip(self.boxes[:, 0] + self.boxes[:, 2], 0, w)
            y1 = np.clip(self.boxes[:, 1] + self.boxes[:, 3], 0, h)
            boxes = np.stack([x0, y0, x1 - x0, y1 - y0, np.ones_like(x0)], axis=1)
            out.append(boxes[(boxes[:, 2] > 0) & (boxes[:, 3] > 0)])
        return out


class FullFrame(Detector):
    """One box covering the whole frame: for crops of a single person, or dense tasks only."""

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array([[0, 0, f.shape[1], f.shape[0], 1.0]], dtype=np.float32) for f in frames]
