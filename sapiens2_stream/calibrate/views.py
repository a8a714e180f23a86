"""The views of a board a camera gives: from photos (a file, a folder or a glob) or sampled from a video.

From a video the frames are taken at a steady stride (about `candidates` of them), the board looked for in each,
sharp ones kept (the variance of the Laplacian over the board, against the sharpest views': motion blur moves the
corners) and, among those, views chosen far apart from each other (where the board is in the picture, how large and
how tilted) so that a board held still for seconds does not outvote the rest of the picture.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from ..io.pyav import av
from ..io.source_parts import IMAGE_SUFFIXES
from ..io.upright import display_orientation, pixel_aspect, square_pixels
from .boards import Board, Found

BLUR_SHARE = 0.35  # a view whose sharpness is under this share of the sharpest views' median is blurred


@dataclass(frozen=True)
class View:
    """The board seen once: `label` names the picture (a file name, or `frame N` of a video), `moment` says when
    (the picture's place among the camera's photos, or the video's frame index): several cameras' views of one
    moment saw the board in one place."""

    label: str
    moment: int
    found: Found
    sharpness: float


@dataclass
class Views:
    """What a camera's pictures gave: its views of the board, the picture size (width, height), how many
    pictures were looked at, and the views left out with why (blurred, or too like a view kept)."""

    views: list[View]
    size: tuple[int, int]
    looked_at: int
    left_out: dict[str, str]


@dataclass(frozen=True)
class Clock:
    """Moments several cameras' videos share: a frame's moment is its time on the reference camera's clock (camera
    time t is reference time t + offset_s) in the reference's frames, and only every `stride`-th moment is looked
    at, the same ones in every camera."""

    fps: float
    stride: int
    offset_s: float = 0.0

    def moment(self, time_s: float) -> int | None:
        k = round((time_s + self.offset_s) * self.fps)
        return k if k % self.stride == 0 else None


def video_clock(path: Path, candidates: int = 120) -> Clock:
    """The clock a reference video gives the others: its frame rate, about `candidates` moments over its length."""
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate or stream.guessed_rate or 30)
            frames = stream.frames or int((container.duration or 0) / 1_000_000 * fps)
    except (av.FFmpegError, IndexError) as e:
        raise Sapiens2StreamError(f"{path}: cannot read this video ({e})") from None
    return Clock(fps, max(1, frames // candidates))


def pictures(spec: str, candidates: int = 120, clock: Clock | None = None) -> Iterator[tuple[str, int, np.ndarray]]:
    """(label, moment, grey picture) of a camera's photos in name order, or of frames of its video (about
    `candidates`, evenly spread; or, with a `clock`, the frames at its moments)."""
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    elif any(c in spec for c in "*?["):
        files = [Path(p) for p in sorted(glob.glob(spec)) if Path(p).suffix.lower() in IMAGE_SUFFIXES]
    elif path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
        files = [path]
    elif path.is_file():
        yield from video_frames(path, candidates, clock)
        return
    else:
        raise Sapiens2StreamError(f"{spec}: no such file, folder or glob")
    if not files:
        raise Sapiens2StreamError(f"{spec}: no pictures there ({', '.join(IMAGE_SUFFIXES)})")
    for moment, file in enumerate(files):
        grey = cv2.imread(str(file), cv2.IMREAD_GRAYSCALE)
        if grey is None:
            raise Sapiens2StreamError(f"{file}: cannot read this picture")
        yield file.name, moment, grey


def video_frames(path: Path, candidates: int, clock: Clock | None = None) -> Iterator[tuple[str, int, np.ndarray]]:
    """The sampled frames in grey, as the runs see the video (`io.upright`: square pixels, then turned upright by
    its display matrix): a phone video's cameras are then calibrated in the pixels its keypoints come in."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise Sapiens2StreamError(f"{path}: no video stream in this file")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stride = max(1, (stream.frames or candidates) // candidates)
            sar, turn = pixel_aspect(stream.codec_context.sample_aspect_ratio), None
            for index, frame in enumerate(container.decode(stream)):
                turn = turn or display_orientation(frame)  # read once: see display_orientation
                moment = (index if index % stride == 0 else None) if clock is None else clock.moment(frame.time or 0)
                if moment is not None:
                    yield f"frame {index}", moment, turn.apply(square_pixels(frame.to_ndarray(format="gray"), sar))
    except av.FFmpegError as e:
        raise Sapiens2StreamError(f"{path}: cannot read this video ({e})") from None


def sharpness(grey: np.ndarray, corners: np.ndarray) -> float:
    """The variance of the Laplacian over the board's bounding box."""
    x0, y0 = np.floor(corners.min(0)).astype(int)
    x1, y1 = np.ceil(corners.max(0)).astype(int) + 1
    patch = grey[max(y0, 0) : y1, max(x0, 0) : x1]
    return float(cv2.Laplacian(patch, cv2.CV_64F).var()) if patch.size else 0.0


def board_views(spec: str, board: Board, max_views: int = 40, clock: Clock | None = None) -> Views:
    """The camera's usable views of `board` from `spec`: every photo where the board is found; from a video, the
    sharp frames (at `clock`'s moments when given), thinned to `max_views` views far apart."""
    found, missed, size, looked_at, video = [], [], None, 0, False
    for label, moment, grey in pictures(spec, clock=clock):
        video = video or label.startswith("frame ")
        looked_at += 1
        shape = (grey.shape[1], grey.shape[0])
        if size is not None and shape != size:
            raise Sapiens2StreamError(f"{spec}: {label} is {shape[0]}x{shape[1]}, the others {size[0]}x{size[1]} "
                                      "(one camera, one picture size)")  # fmt: skip
        size = shape
        seen = board.find(grey)
        if seen is not None:
            found.append(View(label, moment, seen, sharpness(grey, seen.image)))
        elif not video:
            missed.append(label)
    left_out: dict[str, str] = {label: "the board was not found" for label in missed}
    if video and found:  # (photos are each taken on purpose; a far board is less sharp, not blurred)
        sharp = float(np.median(sorted(v.sharpness for v in found)[len(found) // 2 :]))
        for view in found:
            if view.sharpness < BLUR_SHARE * sharp:
                left_out[view.label] = f"blurred (sharpness {view.sharpness:.0f}, the sharp views' {sharp:.0f})"
        found = [v for v in found if v.label not in left_out]
    if video and len(found) > max_views:
        kept = spread(found, size, max_views)
        left_out.update({v.label: "like a view kept" for v in found if v not in kept})
        found = kept
    return Views(found, size or (0, 0), looked_at, left_out)


def spread(views: list[View], size: tuple[int, int], count: int) -> list[View]:
    """`count` views far apart: greedily the view farthest from those taken, by where the board is, how large it is
    and how it is tilted (its corners' outline, in shares of the picture)."""
    scale = np.array(size, np.float64)

    def outline(view: View) -> np.ndarray:
        pts = view.found.image / scale
        hull = cv2.convexHull(pts.astype(np.float32)).reshape(-1, 2)
        return np.concatenate([pts.mean(0), pts.std(0), [cv2.contourArea(hull) ** 0.5]])

    features = np.stack([outline(v) for v in views])
    taken = [int(np.argmax(features[:, 2] + features[:, 3]))]  # the largest board first
    distance = np.linalg.norm(features - features[taken[0]], axis=1)
    while len(taken) < count:
        nxt = int(np.argmax(distance))
        taken.append(nxt)
        distance = np.minimum(distance, np.linalg.norm(features - features[nxt], axis=1))
    return [views[i] for i in sorted(taken)]
