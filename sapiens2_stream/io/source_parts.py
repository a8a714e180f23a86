"""What every kind of input shares: the frame, its source's counters, a live source's link to its camera, frames
handed over from Python, and the pictures of a folder. Light (numpy, OpenCV for photos): the readers of each kind
(`io.readers`) and the source that runs them (`io.sources`) both build on it."""

from __future__ import annotations

import glob
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from ..config import DEFAULT_FPS
from ..errors import Sapiens2StreamError
from .upright import UPRIGHT, Orientation

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


@dataclass
class Frame:
    index: int
    pts_s: float
    wall_s: float
    rgb: np.ndarray  # HxWx3 uint8 RGB


@dataclass
class SourceStats:
    frames: int = 0
    reconnects: int = 0
    gaps_s: float = 0.0  # total time without frames between a drop and the next frame
    corrupt: int = 0  # packets or images that could not be decoded and were skipped
    events: list[str] = field(default_factory=list)
    conversions: list[str] = field(default_factory=list)  # how frames were made upright and square, said once each
    last_frame_wall: float | None = None  # when the latest frame arrived (health checks)


@dataclass
class Connection:
    """A live source's link to its camera, as the status line, console, summary.json, /metrics and /healthz show it."""

    state: str = "connecting"  # connecting (no frame yet), live, reconnecting (dropped), gave_up (give_up_s passed)
    reason: str | None = None  # why the latest attempt failed (its password redacted)
    next_attempt_wall: float | None = None  # when the next attempt is made (unix seconds)

    def snapshot(self) -> dict:
        next_in = None if self.next_attempt_wall is None else max(0.0, self.next_attempt_wall - time.time())
        return {"state": self.state, "reason": self.reason,
                "next_attempt_in_s": None if next_in is None else round(next_in, 1)}  # fmt: skip

    @property
    def up(self) -> bool:
        return self.state == "live"


@dataclass
class Feed:
    """Frames from the caller's own code (the Python API): an iterable of HxWx3 uint8 arrays, or of (array,
    seconds) pairs; `bgr`: the arrays are OpenCV's BGR; `fps`: the timestamps of bare arrays."""

    frames: Iterable
    bgr: bool = False
    fps: float = DEFAULT_FPS


FEEDS: dict[str, Feed] = {}  # python:<n> sources, by URI


def register_feed(feed: Feed) -> str:
    """The URI of a `Feed` as a source (`python:<n>`); `forget_feed` when its run is over."""
    uri = f"python:{id(feed)}"
    FEEDS[uri] = feed
    return uri


def forget_feed(uri: str) -> None:
    FEEDS.pop(uri, None)


def video_devices() -> list[str]:
    """The webcams Linux shows (/dev/video*), for error messages."""
    return sorted(glob.glob("/dev/video*"), key=lambda p: (len(p), p))


def image_paths(uri: str) -> list[Path]:
    p = Path(uri)
    if p.is_dir():
        paths = [q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES]
    else:
        paths = [Path(q) for q in glob.glob(uri)]
    if not paths:
        raise Sapiens2StreamError(f"{uri}: no images found (expected {', '.join(IMAGE_SUFFIXES)})")
    return sorted(paths)


def read_image(path: Path, turn: Orientation = UPRIGHT) -> np.ndarray | None:
    """An image file as HxWx3 uint8 RGB (grayscale, alpha and 16-bit converted), upright by `turn` (its EXIF
    orientation), or None if unreadable."""
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)  # (this flag leaves the EXIF orientation to us)
    if img is None:
        return None
    if img.dtype == np.uint16:
        img = (img / 257).round().astype(np.uint8)
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    elif img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    else:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return turn.apply(img)
