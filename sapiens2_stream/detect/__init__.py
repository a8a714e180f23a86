"""Person detectors behind one small interface: `detect(frames) -> one [n, 5] array (x, y, w, h, score) per frame`.

The kinds `detector.type` names are one registry, `registry.DETECTORS` (`sapiens2-stream list detectors`), filled
by `kinds`: each says what it does, what of its section is wrong before anything loads (`check`, also `validate`'s)
and how it is made.
"""

from __future__ import annotations

from ..registry import DETECTORS
from .base import Detector, FixedBoxes, FullFrame
from .kinds import DetectorKind
from .options import DetectorConfig


def check_detector(cfg: DetectorConfig) -> None:
    """What `make_detector` would refuse, found without loading a model (`validate` and the pipeline's build)."""
    DETECTORS.pick(cfg.type).check(cfg)


def make_detector(cfg: DetectorConfig, device: str = "cpu") -> Detector:
    kind = DETECTORS.pick(cfg.type)
    kind.check(cfg)
    return kind.make(cfg, device)


__all__ = ["Detector", "DetectorKind", "FixedBoxes", "FullFrame", "check_detector", "make_detector"]
