"""Generated test clips: a stick figure walking across a textured background, with known boxes.

Used by the tests and benchmarks that need a clip with known boxes, not a model that sees (for that:
`sapiens2_stream.humans`), so no footage is needed.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from .pyav import av


def figure_box(i: int, n: int, size: tuple[int, int], person: int = 0) -> np.ndarray:
    """The COCO xywh box of person `person` in frame i of n (they walk in opposite directions)."""
    h, w = size
    bh, bw = 0.6 * h, 0.22 * h
    travel = (w - bw) * (i / max(n - 1, 1))
    x = travel if person % 2 == 0 else (w - bw) - travel
    y = 0.2 * h + 0.05 * h * person
    return np.array([x, y, bw, bh], np.float32)


def draw_figure(img: np.ndarray, box: np.ndarray, phase: float, color=(240, 200, 160)) -> None:
    x, y, w, h = box
    cx = x + w / 2
    head = (int(cx), int(y + 0.1 * h))
    cv2.circle(img, head, int(0.08 * h), color, -1)
    neck, hip = (cx, y + 0.2 * h), (cx, y + 0.55 * h)
    swing = 0.25 * w * np.sin(phase)
    lines = [
        (neck, hip), (neck, (cx - 0.4 * w + swing, y + 0.45 * h)), (neck, (cx + 0.4 * w - swing, y + 0.45 * h)),
        (hip, (cx - 0.3 * w - swing, y + h)), (hip, (cx + 0.3 * w + swing, y + h)),
    ]  # fmt: skip
    for a, b in lines:
        cv2.line(img, (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), color, max(2, int(0.06 * w)), cv2.LINE_AA)


def render_frame(i: int, n: int, size: tuple[int, int], people: int) -> tuple[np.ndarray, list[np.ndarray]]:
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), np.full_like(xx, 90)], -1)
    img = img.astype(np.uint8)
    cv2.putText(img, f"{i}", (5, h - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1)
    boxes = [figure_box(i, n, size, p) for p in range(people)]
    for p, box in enumerate(boxes):
        draw_figure(img, box, i * 0.4 + p)
    return img, boxes


def make_clip(
    path: str | Path, frames: int = 30, size: tuple[int, int] = (240, 320), fps: int = 30, people: int = 1,
    audio: bool = False, clap_s: float | None = None,
) -> list[list[np.ndarray]]:  # fmt: skip
    """Write an H.264 mp4 (optionally with an AAC tone, or with `clap_s` a quiet room and a clap then) and return
    the true boxes of each frame."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    truth = []
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps, options={"preset": "ultrafast"})
        video.width, video.height, video.pix_fmt = size[1], size[0], "yuv420p"
        sound = out.add_stream("aac", rate=48000) if audio else None
        for i in range(frames):
            img, boxes = render_frame(i, frames, size, people)
            truth.append(boxes)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            for packet in video.encode(frame):
                out.mux(packet)
        if sound is not None:
            samples = int(48000 * frames / fps)
            t = np.arange(samples) / 48000
            if clap_s is None:
                tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
            else:
                noise = np.random.default_rng(0).normal(size=t.size)
                tone = (np.where((t >= clap_s) & (t < clap_s + 0.02), 0.5, 0.005) * noise).astype(np.float32)[None]
            chunk = 1024
            for start in range(0, samples, chunk):
                af = av.AudioFrame.from_ndarray(np.ascontiguousarray(tone[:, start : start + chunk]), format="fltp",
                                                layout="mono")  # fmt: skip
                af.sample_rate, af.pts, af.time_base = 48000, start, Fraction(1, 48000)
                for packet in sound.encode(af):
                    out.mux(packet)
            for packet in sound.encode(None):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
    return truth


def record_lavfi(path: str | Path, frames: int, fps: float, size: tuple[int, int] = (240, 320),
                 source: str = "testsrc2") -> None:  # fmt: skip
    """What a camera-paced `lavfi:{source}=...,realtime` source sends, recorded to an H.264 file (for comparing a
    live run with a run of the same pictures from a file)."""
    h, w = size
    with av.open(f"{source}=size={w}x{h}:rate={fps}", format="lavfi") as inp, av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001), options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i, frame in enumerate(inp.decode(video=0)):
            if i == frames:
                break
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
