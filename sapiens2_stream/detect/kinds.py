"""The kinds `detector.type` names, one registry: `registry.DETECTORS` (`sapiens2-stream list detectors`). Each says
what it does, what of its section is wrong before anything loads (`check`, also `validate`'s) and how it is made.
Light on purpose: each detector's own module is imported when it is made or checked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..registry import DETECTORS, Row
from .base import Detector, FixedBoxes, FullFrame
from .options import DetectorConfig


@dataclass(frozen=True)
class DetectorKind:
    name: str
    doc: str  # one line, for `list detectors`
    make: Callable[[DetectorConfig, str], Detector]  # (section, device) -> the detector
    check: Callable[[DetectorConfig], None] = lambda cfg: None  # configuration errors, found without loading

    def listing(self) -> Row:
        return self.name, "batch", "detect stage", "detector", self.doc


def _yolo(cfg: DetectorConfig, device: str) -> Detector:
    from .yolo import YoloDetector

    return YoloDetector(cfg, device)


def _check_yolo(cfg: DetectorConfig) -> None:
    from .yolo import check_weights

    check_weights(cfg.weights)


def _boxes_file(cfg: DetectorConfig, device: str) -> Detector:
    from .boxes_file import BoxesFile

    return BoxesFile(cfg.path)


def _check_boxes_file(cfg: DetectorConfig) -> None:
    """The file when one is named; without one, each source's own is checked with the sources (pipeline_config)."""
    from .boxes_file import read_boxes

    if cfg.path:
        read_boxes(cfg.path)


DETECTORS.add(DetectorKind("yolo", "Ultralytics YOLO (COCO person class) from detector.weights: a local .pt or a hub "
                           "name", _yolo, _check_yolo))  # fmt: skip
DETECTORS.add(DetectorKind("fixed", "the same boxes (detector.boxes) in every frame: a fixed framing, or tests",
                           lambda cfg, device: FixedBoxes(np.asarray(cfg.boxes, dtype=np.float32))))  # fmt: skip
DETECTORS.add(DetectorKind("full_frame", "one box, the whole frame: crops of a single person, dense tasks only",
                           lambda cfg, device: FullFrame()))  # fmt: skip
DETECTORS.add(DetectorKind("file", "the boxes of detector.path per frame (a synthetic clip's truth.json or a MOT "
                           "det.txt); without a path, each video's own, beside it", _boxes_file,
                           _check_boxes_file))  # fmt: skip
