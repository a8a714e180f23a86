"""The video outputs: the annotated video, the matting composite and alpha, normals and depth, and the pictures
they draw (made once per result and shared with the re-stream and the window). Videos are fragmented MP4 while
written (see io.video_writer), so a killed process leaves them playable.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch

from ..processing.dense import composite
from .draw import depth_image, draw_box, draw_pose, draw_rules, draw_seg, draw_views_3d, normals_image
from .sink import Sink, best_keypoints
from .video_feed import VideoFeed
from .video_writer import VideoWriter

GREEN_SCREEN = (0, 177, 64)


log = logging.getLogger("sapiens2_stream")


def annotated(result, draw: list[str], threshold: float, background=GREEN_SCREEN) -> np.ndarray:
    """`annotate`, made once per result and shared by the outputs that show it (video, re-stream, window);
    read-only."""
    key = ("annotated", tuple(draw), threshold, id(background))
    if key not in result.pictures:
        result.pictures[key] = annotate(result, draw, threshold, background)
    return result.pictures[key]


def annotate(result, draw: list[str], threshold: float, background=GREEN_SCREEN) -> np.ndarray:
    """The frame with the requested layers drawn: seg overlay, matting composite (over `background`), boxes with
    ids, skeletons."""
    img = result.frame.rgb.copy()
    if "seg" in draw and result.seg is not None:
        draw_seg(img, result.seg)
    if "matting" in draw and result.alpha is not None:
        img = matte_composite(result, background).copy()
    for p in result.people:
        if "boxes" in draw:
            draw_box(img, p.box, f"id {p.track_id}")
        kp = best_keypoints(p)
        if ("pose" in draw or "keypoints" in draw) and kp is not None:
            draw_pose(img, kp, p.keypoint_scores, threshold, every_point="keypoints" in draw)
    if "view_3d" in draw:
        draw_views_3d(img, result.people, result.world_from_camera, threshold)
    if getattr(result, "event_rules", None) is not None:
        draw_rules(img, result.event_rules)
    return img


def layers(video_cfg) -> list[str]:
    """What the annotated picture shows: `draw`, and the 3-D views when `view_3d` asks for them."""
    return [*video_cfg.draw, *(["view_3d"] if video_cfg.view_3d else [])]


def matte_composite(result, background) -> np.ndarray:
    """The matte over `background`, made once per result: the composite video, the annotated video and the window
    share it (read-only; copy before drawing on it)."""
    key = ("matte", id(background))
    if key not in result.pictures:
        alpha = torch.from_numpy(result.alpha)[None]
        fg = torch.from_numpy(result.foreground).permute(2, 0, 1)
        result.pictures[key] = composite(alpha, fg, background, frame=result.frame.rgb).numpy()
    return result.pictures[key]


def open_writer(path: Path, fps: float | None, video_cfg, resume=None, feed: VideoFeed | None = None) -> VideoWriter:
    """A video writer; when resuming, it starts with the frames of the interrupted run's file up to the first one
    the run draws again (`resume.redraw_from`). `feed`: offered what it encodes from then on (a live view)."""
    writer = VideoWriter(path, fps, video_cfg.crf, video_cfg.preset, background=True, encoder=video_cfg.encoder)
    if writer.why_not is not None and video_cfg.encoder == "nvenc":
        log.warning("outputs.video.encoder nvenc: %s; encoding %s with x264 on the CPU", writer.why_not, path.name)
    if resume is not None and path.exists():  # the prefill is the past, not live: not offered to the feed
        previous = path.with_name(path.stem + ".previous.mp4")
        os.replace(path, previous)
        writer.prefill(previous, resume.redraw_from)
        previous.unlink()
    if feed is not None:
        writer.on_packet, writer.on_picture = feed.packet, feed.picture
    return writer


class VideoSink(Sink):
    kind, redraw = "video", True

    def __init__(self, path: Path, fps: float | None, cfg, audio_source: str | None, resume, background,
                 feed: VideoFeed | None = None) -> None:  # fmt: skip
        self.writer = open_writer(path, fps, cfg, resume, feed)
        self.feed = feed
        self.cfg = cfg
        self.background = background
        self.audio_source = audio_source if cfg.copy_audio else None
        self.last_pts: float | None = None

    def write(self, result) -> None:
        img = annotated(result, layers(self.cfg), self.cfg.keypoint_threshold, self.background)
        if self.feed is not None and self.last_pts is None:
            self.feed.recording = self.writer.path
        self.writer.write(img, result.frame.pts_s)
        self.last_pts = result.frame.pts_s

    def close(self) -> None:
        if self.feed is not None and self.feed.recording == self.writer.path:
            self.feed.recording = None
        self.writer.close(self.audio_source, end_s=self.last_pts)

    def stats(self) -> dict | None:
        """With outputs.video.encoder other than cpu: the encoder it got, and why not the GPU's where not."""
        if self.cfg.encoder == "cpu":
            return None
        return {"encoder": self.writer.codec, **({"why_not": self.writer.why_not} if self.writer.why_not else {})}


class VideosSink(Sink):
    """A sink writing some optional videos into the output folder, each opened (or resumed) the same way."""

    redraw = True

    def __init__(self, out_dir: Path, fps: float | None, video_cfg, resume) -> None:
        self.out_dir, self.fps, self.video_cfg, self.resume = out_dir, fps, video_cfg, resume
        self.writers: list[VideoWriter] = []

    def video(self, name: str, wanted: bool) -> VideoWriter | None:
        """A writer for out_dir/name when `wanted`, closed with the sink."""
        if not wanted:
            return None
        writer = open_writer(self.out_dir / name, self.fps, self.video_cfg, self.resume)
        self.writers.append(writer)
        return writer

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class MattingSink(VideosSink):
    """Composite video over a colour, an image or a blur of the frame, and optionally the alpha as a video."""

    def __init__(self, out_dir: Path, fps: float | None, cfg, video_cfg, resume, background) -> None:
        super().__init__(out_dir, fps, video_cfg, resume)
        self.background = background  # as matting_background() resolved it
        self.composite = self.video(cfg.composite_name, cfg.composite)
        self.alpha = self.video(cfg.alpha_name, cfg.alpha)

    def write(self, result) -> None:
        if result.alpha is None:
            return
        if self.composite is not None:
            self.composite.write(matte_composite(result, self.background), result.frame.pts_s)
        if self.alpha is not None:
            gray = (np.clip(result.alpha, 0, 1) * 255 + 0.5).astype(np.uint8)
            self.alpha.write(np.repeat(gray[..., None], 3, axis=2), result.frame.pts_s)


class GeometrySink(VideosSink):
    """Normal and pointmap results: videos people can watch (normals as colours, depth as a colour map) and, on
    request, the maps themselves per frame for 3-D tools (each file written whole, then renamed into place)."""

    def __init__(self, out_dir: Path, fps: float | None, cfg, video_cfg, resume, tasks) -> None:
        super().__init__(out_dir, fps, video_cfg, resume)
        self.normals = self.video(cfg.normals_name, cfg.normals_video and "normal" in tasks)
        self.depth = self.video(cfg.depth_name, cfg.depth_video and "pointmap" in tasks)
        self.maps = out_dir / "maps" if cfg.maps else None
        if self.maps is not None:
            self.maps.mkdir(exist_ok=True)

    def write(self, result) -> None:
        pts = result.frame.pts_s
        if self.normals is not None and result.normals is not None:
            self.normals.write(normals_image(result.normals), pts)
        if self.depth is not None and result.pointmap is not None:
            self.depth.write(depth_image(result.pointmap[..., 2]), pts)
        if self.maps is not None:
            maps = {"normals": result.normals, "pointmap": result.pointmap}
            arrays = {name: a.astype(np.float16) for name, a in maps.items() if a is not None}
            path = self.maps / f"frame_{result.frame.index:06d}.npz"
            with open(path.with_suffix(".tmp"), "wb") as f:
                np.savez(f, pts=np.float64(pts), **arrays)
            os.replace(path.with_suffix(".tmp"), path)


class LiveViewSink(Sink):
    """The live view of a source that records no annotated video: drawn and encoded only while someone watches its
    feed (the encoder closed when the last viewer leaves, so the next one starts at a fresh keyframe)."""

    def __init__(self, fps: float | None, video_cfg, background, feed: VideoFeed) -> None:
        self.fps, self.video_cfg, self.background, self.feed = fps, video_cfg, background, feed
        self.writer: VideoWriter | None = None

    def write(self, result) -> None:
        if not self.feed.watched():
            self.close()
            return
        if self.writer is None:
            self.writer = VideoWriter(None, self.fps, self.video_cfg.crf, self.video_cfg.preset,
                                      on_packet=self.feed.packet, on_picture=self.feed.picture,
                                      encoder=self.video_cfg.encoder)  # fmt: skip
        picture = annotated(result, layers(self.video_cfg), self.video_cfg.keypoint_threshold, self.background)
        self.writer.write(picture, result.frame.pts_s)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
