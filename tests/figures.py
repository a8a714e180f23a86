"""Real runs of the pipeline whose people follow drawn figures: a clip of stick figures walking in lanes with known
positions, a detector that finds them by their colour, and a stand-in pose model that puts the keypoints on the
figure it is shown (the feet under its lowest pixels, the hips at 55% of its height, everything else at its
middle). The crops, heatmap decoding, tracking, smoothing and events are the pipeline's own."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import cv2
import numpy as np
import torch

from sapiens2_stream.detect.base import Detector
from sapiens2_stream.events.rules import FEET, ids
from sapiens2_stream.io.synthetic import draw_figure
from sapiens2_stream.models.metadata import NUM_KEYPOINTS
from sapiens2_stream.processing.geometry import normalization

W, H = 320, 240
FIGURE_H = 64
BLUE_MIN = 125  # the figures' blue (160) against the background's (90)


@dataclass
class Walker:
    """A figure in a lane (the top of its box at `top`) whose centre x follows `x(t)`."""

    top: float
    x: object

    def box(self, t: float) -> np.ndarray:  # COCO xywh
        w = 0.22 * FIGURE_H
        return np.array([self.x(t) - w / 2, self.top, w, FIGURE_H], np.float32)


def render(walkers: list[Walker], t: float) -> np.ndarray:
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([xx * 255 // (W - 1), yy * 255 // (H - 1), np.full_like(xx, 90)], -1).astype(np.uint8)
    for i, walker in enumerate(walkers):
        draw_figure(img, walker.box(t), t * 10 + i)
    return img


def write_clip(path, walkers: list[Walker], seconds: float, fps: int) -> None:
    import av

    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "18"})
        video.width, video.height, video.pix_fmt = W, H, "yuv420p"
        for i in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(render(walkers, i / fps), format="rgb24")
            frame.pts = i
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)


def figure_mask(rgb: np.ndarray) -> np.ndarray:
    """The figures' pixels (uint8 0/1), joined across the small gaps thin lines leave after compression."""
    return cv2.dilate((rgb[..., 2] > BLUE_MIN).astype(np.uint8), np.ones((5, 5), np.uint8))


class FigureDetector(Detector):
    """Boxes around the figures (connected blobs of their colour)."""

    def detect(self, frames):
        out = []
        for rgb in frames:
            count, _, stats, _ = cv2.connectedComponentsWithStats(figure_mask(rgb))
            boxes = [[x, y, w, h, 1.0] for x, y, w, h, area in stats[1:count] if area > 40]
            out.append(np.array(boxes, np.float32).reshape(-1, 5))
        return out


class FollowTheFigure(torch.nn.Module):
    """A stand-in pose model: heatmaps (1/4 of the crop's size) with peaks on the figure in each crop (the largest
    blob of its colour). `delay_s` per crop: a slower model, for runs that must fall behind a live source."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.feet, self.hips = ids(*FEET), ids("left_hip", "right_hip")

    def forward(self, x: torch.Tensor):
        mean, std = normalization(x.device)
        pictures = (x.float() * std + mean).permute(0, 2, 3, 1).clamp(0, 255).byte().cpu().numpy()
        n, _, h, w = x.shape
        hh, ww = h // 4, w // 4
        heatmaps = np.zeros((n, NUM_KEYPOINTS, hh, ww), np.float32)
        yy, xx = np.mgrid[0:hh, 0:ww]
        for i, rgb in enumerate(pictures):
            time.sleep(self.delay_s)
            count, labels, stats, _ = cv2.connectedComponentsWithStats(figure_mask(rgb))
            if count < 2:
                continue
            ys, xs = np.nonzero(labels == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA])))
            bottom, top = ys.max() - 2, ys.min() + 2  # the dilation's margin off
            places = np.full((NUM_KEYPOINTS, 2), [xs.mean(), (top + bottom) / 2])
            places[self.feet] = [xs[ys >= ys.max() - 3].mean(), bottom]
            places[self.hips] = [xs.mean(), top + 0.55 * (bottom - top)]
            u, v = places[:, 0] * (ww - 1) / (w - 1), places[:, 1] * (hh - 1) / (h - 1)
            heatmaps[i] = np.exp(-((xx - u[:, None, None]) ** 2 + (yy - v[:, None, None]) ** 2) / (2 * 1.5**2))
        return SimpleNamespace(heatmaps=torch.from_numpy(heatmaps).to(x.device))


def figure_models(cfg, delay_s: float = 0.0):
    """The run's models and detector with the stand-ins in place of the pose model and the detector."""
    from sapiens2_stream.runtime.pipeline import load_models

    loaded = load_models(cfg)
    loaded.engine.runners["pose"] = FollowTheFigure(delay_s)
    loaded.engine.fused_flip.discard("pose")
    loaded.detector = FigureDetector()
    return loaded
