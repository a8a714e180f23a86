"""Detections read from a file instead of found: a synthetic clip's `.truth.json` (`sapiens2-stream synth clip`)
or a MOTChallenge `det.txt` (`frame, id, x, y, w, h, score, ...`, frames from 1). For scoring everything after
the detector against known boxes, and for runs on detections another tool made. Without `detector.path` each
video's own file is read, the one beside it (`VIDEO.truth.json` or `VIDEO.det.txt`): several cameras, each with
its own detections."""

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


def detections_beside(video: str) -> str:
    """The detections file that belongs to a video: `VIDEO.truth.json` (a synthetic clip's) or `VIDEO.det.txt`."""
    candidates = [Path(video).with_suffix(".truth.json"), Path(video).with_suffix(".det.txt")]
    for path in candidates:
        if path.is_file():
            return str(path)
    raise Sapiens2StreamError(f"{video}: detector type file without a path reads the detections beside the video "
                              f"({' or '.join(p.name for p in candidates)}); neither is there")  # fmt: skip


class BoxesFile(Detector):
    """The file's boxes for each frame, by the frame's index in its source; without a path, each source's own file
    (read the first time one of its frames comes)."""

    def __init__(self, path: str | Path = "") -> None:
        self.boxes = read_boxes(path) if path else None
        self.beside: dict[str, dict[int, np.ndarray]] = {}  # a source's uri -> its own file's boxes

    def detect(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise Sapiens2StreamError("detector type file needs frame numbers: call detect_frames")

    def detect_frames(self, frames, sources: Sequence[str] = ()) -> list[np.ndarray]:
        none = np.zeros((0, 5), np.float32)
        uris = sources or [""] * len(frames)  # with a path, the sources are not needed
        return [self.boxes_of(uri).get(frame.index, none) for frame, uri in zip(frames, uris, strict=True)]

    def boxes_of(self, uri: str) -> dict[int, np.ndarray]:
        """The boxes by frame index for a source: the file's (with a path), else the source's own file's."""
        if self.boxes is not None:
            return self.boxes
        if uri not in self.beside:
            self.beside[uri] = read_boxes(detections_beside(uri))
        return self.beside[uri]
