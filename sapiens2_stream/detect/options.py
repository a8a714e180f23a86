"""The `detector:` section: which detector finds people and how (its kinds: `registry.DETECTORS`, `detect.kinds`).

A package's options live in its `options` module, which loads without torch, PyAV or ultralytics: reading a pipeline
file stays quick (the configuration is assembled from these sections, `runtime/pipeline_config.py`)."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import Field

from ..config import AtLeast0, Count, Share, section
from ..registry import DETECTORS, registered


@section(key="detector")
class DetectorConfig:
    type: Annotated[str, registered(DETECTORS)] = "yolo"  # `sapiens2-stream list detectors`; fixed: the boxes
    # below; full_frame: one box, the frame; file: the boxes of `path` per frame
    weights: str = "yolo11n.pt"  # a local .pt or a model .yaml (random init) for ultralytics
    conf: Share = 0.3  # the detector's minimum confidence for a person
    iou: Share = 0.5  # non-maximum suppression overlap
    min_size: AtLeast0 = 8.0  # drop boxes whose shorter side is under this many pixels
    max_people: Count = 20  # the most confident boxes kept per frame
    every: Count | Literal["auto"] = 1  # detect every N frames, the tracker carrying boxes in between; auto: every
    # frame while the machine keeps up with a live source, every 3rd while it falls behind
    imgsz: Annotated[int, Field(ge=32)] = 640  # the detector's input size (pixels, longer side)
    boxes: list[Annotated[list[float], Field(min_length=4, max_length=4)]] = field(default_factory=list)  # fixed:
    # COCO xywh boxes
    path: str = ""  # file: a synthetic clip's .truth.json or a MOTChallenge det.txt (frame, id, x, y, w, h, score)
