"""Detections read from a file instead of found: a synthetic clip's `.truth.json` (`sapiens2-stream synth clip`)
or a MOTChallenge `det.txt` (`frame, id, x, y, w, h, score, ...`, frames from 1). For scoring everything after
the detector against known boxes, and for runs on detections another tool made."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import Sapiens2StreamError
from .base import Detector


def read_boxes(path: str | Path) -> dict[int, np.ndarray]:
    """Frame index (from 0) -> [n, 5] boxes (x, y, w, h, score)."""
    path = Path(path)
    if not path.is_file():
        raise Sapiens2StreamError(f"detector.path {path}: no such file")
    rows: dict[int, list] = defaultdict(list)
    try:
        if path.suffix == ".json":
            for i, frame in enumerate(json.loads(path.read_text())["frames"]):
                rows[i] = [[*p["box"], 1.0] for p in frame["people"] if p["box"][2] > 0 and p["box"][3] > 0]
        else:
            for line in path.read_text().splitlines():
                if line.strip():
                    v = [float(x) for x in line.replace(",", " ").split()]
                    rows[int(v[0]) - 1].append([*v[2:6], v[6] if len(v) > 6 and v[6] >= 0 else 1.0])
    except (KeyError, ValueError, IndexError, TypeError, json.JSONDecodeError) as e:
        raise Sapiens2StreamError(
            f"detector.path {path}: neither a clip's truth.json nor a MOT det.txt ({e})"
        ) from None
    return {i: np.array(r, np.float32).reshape(-1, 5) for i, r in rows.items()}


class BoxesFile(Detector):
    """The file's boxes for each frame, by the frame's index in its source."""

    def __init__(self, path: str | Path) -> None:
        self.boxes = read_boxes(path)

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise Sapiens2StreamError("detector type file needs frame numbers: call detect_frames")

    def detect_frames(self, frames) -> list[np.ndarray]:
        return [self.boxes.get(f.index, np.zeros((0, 5), np.float32)) for f in frames]
