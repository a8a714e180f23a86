"""Person detectors behind one small interface: `detect(frames) -> one [n, 5] array (x, y, w, h, score) per frame`."""

from __future__ import annotations

import numpy as np

from ..config import DetectorConfig
from .base import Detector, FixedBoxes, FullFrame


def make_detector(cfg: DetectorConfig, device: str = "cpu") -> Detector:
    if cfg.type == "fixed":
        return FixedBoxes(np.asarray(cfg.boxes, dtype=np.float32))
    if cfg.type == "full_frame":
        return FullFrame()
    if cfg.type == "file":
        from .boxes_file import BoxesFile

        return BoxesFile(cfg.path)
    from .yolo import YoloDetector

    return YoloDetector(cfg, device)


__all__ = ["Detector", "FixedBoxes", "FullFrame", "make_detector"]
