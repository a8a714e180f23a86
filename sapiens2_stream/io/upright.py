"""Frames as players show them: upright and with square pixels, before any stage sees them.

Phone videos are stored landscape with a display matrix (rotation, sometimes a mirror) that players apply; photos
carry an EXIF orientation; DV and broadcast files have non-square pixels (a sample aspect ratio other than 1).
Processed as stored, people lie on their side or are stretched, which wrecks pose estimation. Every transform
here is exact (transposes and flips; square pixels by resampling the width), so boxes and keypoints come out in
the upright picture's pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

TURNS = {
    (False, False, False): "as stored",
    (False, True, True): "turned 180 degrees",
    (True, True, False): "turned 90 degrees counterclockwise",
    (True, False, True): "turned 90 degrees clockwise",
    (False, False, True): "mirrored left-right",
    (False, True, False): "mirrored top-bottom",
    (True, False, False): "transposed (mirrored and turned 90 degrees)",
    (True, True, True): "anti-transposed (mirrored and turned 90 degrees)",
}


@dataclass(frozen=True)
class Orientation:
    """An axis-aligned display transform: transpose first, then flip rows and/or columns."""

    transpose: bool = False
    flip_rows: bool = False
    flip_cols: bool = False

    def apply(self, image: np.ndarray) -> np.ndarray:
        if not (self.transpose or self.flip_rows or self.flip_cols):
            return image
        if self.transpose:
            image = image.swapaxes(0, 1)
        if self.flip_rows:
            image = image[::-1]
        if self.flip_cols:
            image = image[:, ::-1]
        return np.ascontiguousarray(image)

    def __str__(self) -> str:
        return TURNS[(self.transpose, self.flip_rows, self.flip_cols)]


UPRIGHT = Orientation()
# EXIF orientation tag (0x0112) values 1-8 -> the transform that shows the photo upright
EXIF = {
    1: UPRIGHT, 2: Orientation(flip_cols=True), 3: Orientation(flip_rows=True, flip_cols=True),
    4: Orientation(flip_rows=True), 5: Orientation(transpose=True), 6: Orientation(True, False, True),
    7: Orientation(True, True, True), 8: Orientation(True, True, False),
}  # fmt: skip


def display_orientation(frame) -> Orientation:
    """The transform a player applies to a decoded PyAV frame: from its display matrix (FFmpeg's side data),
    whose first column says where the stored x axis points on screen and second where the y axis points.

    Read it once per stream, not per frame: PyAV's side-data container and its frame refer to each other, so each
    frame read this way (with its picture buffers, natively allocated) lives until Python's cyclic collector runs,
    which on a large heap can be minutes (a live run's memory grew by hundreds of MB an hour)."""
    side = frame.side_data
    for key in side:
        data = key if hasattr(key, "type") else side[key]  # PyAV 18.1.0 iterates its side data, 18.1.1 their types
        if data.type.name == "DISPLAYMATRIX":
            m = np.frombuffer(bytes(data)[:36], np.int32)
            a, b, c, d = int(m[0]), int(m[1]), int(m[3]), int(m[4])
            if abs(a) >= abs(b):  # the stored x axis stays horizontal
                return Orientation(False, d < 0, a < 0)
            return Orientation(True, b < 0, c < 0)
    return UPRIGHT


def exif_orientation(path: Path) -> Orientation:
    """A photo's EXIF orientation (the header only is read)."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return EXIF.get(img.getexif().get(0x0112, 1), UPRIGHT)
    except OSError:
        return UPRIGHT


def pixel_aspect(sample_aspect_ratio) -> Fraction:
    """A stream's sample aspect ratio, 1 when unknown."""
    sar = Fraction(sample_aspect_ratio) if sample_aspect_ratio else Fraction(1)
    return sar if sar > 0 else Fraction(1)


def square_pixels(image: np.ndarray, sar: Fraction) -> np.ndarray:
    """Resample a frame with non-square pixels (width * sar shown per stored width) to square ones, as players
    display it: the width is scaled, the height kept."""
    if sar == 1:
        return image
    h, w = image.shape[:2]
    width = max(2, round(w * sar))
    interpolation = cv2.INTER_AREA if width < w else cv2.INTER_CUBIC
    return cv2.resize(image, (width, h), interpolation=interpolation)
