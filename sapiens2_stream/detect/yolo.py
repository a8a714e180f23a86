"""Ultralytics YOLO as a person detector (COCO class 0), on any local .pt or model .yaml.

Ultralytics is AGPL-3.0. Hub weight names such as `yolo11n.pt` are downloaded by ultralytics itself when
the file is not present locally; with YOLO_OFFLINE=1 that fails with a clear message instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import Sapiens2StreamError
from .base import Detector
from .options import DetectorConfig

PERSON = 0


def check_weights(weights: str) -> None:
    """Weights that cannot load, known before ultralytics is asked: a path (it names a folder) to no file, or a
    bare hub name while YOLO_OFFLINE is set. A bare name is otherwise ultralytics' to download."""
    local = Path(weights).expanduser()
    if local.exists() or weights.endswith(".yaml"):
        return
    if Path(weights).parent != Path("."):
        raise Sapiens2StreamError(f"detector.weights {weights!r}: no such file")
    if os.environ.get("YOLO_OFFLINE"):
        raise Sapiens2StreamError(
            f"detector.weights {weights!r} is not a local file and YOLO_OFFLINE is set; "
            "point it at a downloaded .pt file"
        )


class YoloDetector(Detector):
    def __init__(self, cfg: DetectorConfig, device: str = "cpu") -> None:
        os.environ.setdefault("YOLO_AUTOINSTALL", "0")
        weights = cfg.weights
        local = Path(weights).expanduser()
        check_weights(weights)
        from ultralytics import YOLO

        try:
            self.model = YOLO(str(local) if local.exists() else weights)
        except Exception as e:  # ultralytics raises many types for bad weights; all mean the same to a user
            raise Sapiens2StreamError(f"detector.weights {weights!r}: cannot load ({e})") from None
        self.cfg = cfg
        self.device = device

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        cfg = self.cfg
        # ultralytics expects BGR numpy frames
        results = self.model.predict(
            [f[..., ::-1] for f in frames], conf=cfg.conf, iou=cfg.iou, classes=[PERSON], imgsz=cfg.imgsz,
            max_det=cfg.max_people, device=self.device, verbose=False,
        )  # fmt: skip
        out = []
        for r in results:
            xyxy = r.boxes.xyxy.cpu().numpy().astype(np.float32)
            conf = r.boxes.conf.cpu().numpy().astype(np.float32)
            boxes = np.concatenate([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2], conf[:, None]], axis=1)
            keep = np.minimum(boxes[:, 2], boxes[:, 3]) >= cfg.min_size
            out.append(boxes[keep].reshape(-1, 5))
        return out
