"""Result sinks, several at once: annotated video, JSONL per frame, per-track exports, matting videos, display.

Every sink writes as results arrive and finishes its file on `close`. Even a killed process leaves complete
outputs: videos are fragmented MP4 (see io.video) and each JSON line reaches the file in one write call.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import torch

from ..config import PipelineConfig
from ..errors import Sapiens2StreamError
from ..processing.dense import composite
from .draw import depth_image, draw_box, draw_pose, draw_seg, normals_image
from .video import VideoWriter

GREEN_SCREEN = (0, 177, 64)


class Sink:
    redraw = False  # takes the frames `--resume` draws again (videos); records (JSONL, tracks) have them already

    def write(self, result) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish the output; called once, also after an interruption."""

    def stats(self) -> dict | None:
        """What an output that can refuse work (a server away) sent and dropped; None for files."""
        return None


PX_DIGITS, SCORE_DIGITS, PTS_DIGITS = 2, 4, 6  # what the JSONL keeps: 0.01 px, 1e-4 score, 1 us


def rounded(a: np.ndarray | None, digits: int = PX_DIGITS) -> list | None:
    """An array as a JSON list, rounded (0.01 px by default)."""
    return None if a is None else np.round(np.asarray(a, np.float64), digits).tolist()


def as_recorded(pts_s: float, keypoints: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """A person's time, keypoints and scores exactly as the JSONL records them. The smoother takes these, so a
    resumed run that replays the records reproduces its state bit for bit (a score rounded across the gating
    threshold would otherwise change it)."""
    return (round(pts_s, PTS_DIGITS), np.round(np.asarray(keypoints, np.float64), PX_DIGITS),
            np.round(np.asarray(scores, np.float64), SCORE_DIGITS))  # fmt: skip


def seg_counts(labels: np.ndarray) -> dict[int, int]:
    """Pixels per body-part class (the classes present)."""
    counts = np.bincount(labels.ravel(), minlength=29)
    return {int(c): int(n) for c, n in enumerate(counts) if n}


class JsonlSink(Sink):
    """One JSON object per frame: source, frame index, pts, and per person the track, box and keypoints."""

    def __init__(self, path: Path, source_id: str, model_ids: dict[str, str], append: bool = False) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self.fd = os.open(path, flags, 0o644)
        self.source_id = source_id
        self.model_ids = model_ids

    def record(self, result) -> dict:
        frame = result.frame
        rec = {
            "source": self.source_id, "frame": frame.index, "pts": round(frame.pts_s, PTS_DIGITS),
            "wall": round(frame.wall_s, 3), "models": self.model_ids, "flip": result.flip,
            "people": [
                {
                    "track_id": p.track_id, "box": rounded(p.box), "score": round(float(p.score), 4),
                    "keypoints": rounded(p.keypoints), "keypoint_scores": rounded(p.keypoint_scores, SCORE_DIGITS),
                    "keypoints_smoothed": rounded(p.smoothed),
                }
                for p in result.people
            ],
        }  # fmt: skip
        if result.seg is not None:
            rec["seg_pixels"] = seg_counts(result.seg)
        return rec

    def write(self, result) -> None:
        """One write call per line: a process killed at any moment leaves whole lines only."""
        data = (json.dumps(self.record(result), separators=(",", ":")) + "\n").encode()
        written = os.write(self.fd, data)
        while written < len(data):  # a short write (a full disk, a signal): finish the line
            written += os.write(self.fd, data[written:])

    def close(self) -> None:
        os.close(self.fd)


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
        kp = p.smoothed if p.smoothed is not None else p.keypoints
        if "pose" in draw and kp is not None:
            draw_pose(img, kp, p.keypoint_scores, threshold)
    return img


def matte_composite(result, background) -> np.ndarray:
    """The matte over `background`, made once per result: the composite video, the annotated video and the window
    share it (read-only; copy before drawing on it)."""
    key = ("matte", id(background))
    if key not in result.pictures:
        alpha = torch.from_numpy(result.alpha)[None]
        fg = torch.from_numpy(result.foreground).permute(2, 0, 1)
        result.pictures[key] = composite(alpha, fg, background, frame=result.frame.rgb).numpy()
    return result.pictures[key]


def open_writer(path: Path, fps: float | None, video_cfg, resume=None, tap=None) -> VideoWriter:
    """A video writer; when resuming, it starts with the frames of the interrupted run's file up to the first one
    the run draws again (`resume.redraw_from`). `tap`: the console's live view of what it encodes."""
    writer = VideoWriter(path, fps, video_cfg.crf, video_cfg.preset)
    writer.tap = None  # the prefill below is the past, not live
    if resume is not None and path.exists():
        previous = path.with_name(path.stem + ".previous.mp4")
        os.replace(path, previous)
        writer.prefill(previous, resume.redraw_from)
        previous.unlink()
    writer.tap = tap
    return writer


def video_names(cfg: PipelineConfig) -> list[str]:
    """The videos this configuration writes into the output folder."""
    o, tasks = cfg.outputs, cfg.enabled_models()
    wanted = [
        (o.video.name, o.video.enabled),
        (o.matting.composite_name, "matting" in tasks and o.matting.composite),
        (o.matting.alpha_name, "matting" in tasks and o.matting.alpha),
        (o.geometry.normals_name, "normal" in tasks and o.geometry.normals_video),
        (o.geometry.depth_name, "pointmap" in tasks and o.geometry.depth_video),
    ]
    return [name for name, on in wanted if on]


class VideoSink(Sink):
    redraw = True

    def __init__(self, path: Path, fps: float | None, cfg, audio_source: str | None, resume, background,
                 tap=None) -> None:  # fmt: skip
        self.writer = open_writer(path, fps, cfg, resume, tap)
        self.cfg = cfg
        self.background = background
        self.audio_source = audio_source if cfg.copy_audio else None
        self.last_pts: float | None = None

    def write(self, result) -> None:
        img = annotated(result, self.cfg.draw, self.cfg.keypoint_threshold, self.background)
        self.writer.write(img, result.frame.pts_s)
        self.last_pts = result.frame.pts_s

    def close(self) -> None:
        self.writer.close(self.audio_source, end_s=self.last_pts)


def matting_background(background):
    """The configured background: an (r, g, b) colour, "blur", or an image file read once."""
    if isinstance(background, str) and background != "blur":
        img = cv2.imread(background, cv2.IMREAD_COLOR)
        if img is None:
            raise Sapiens2StreamError(f"outputs.matting.background: cannot read image {background!r}")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return tuple(background) if isinstance(background, (list, tuple)) else background


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


def file_sinks(cfg: PipelineConfig, source, out: Path, background, resume=None, tap=None) -> list[Sink]:
    """The sinks that write files into `out` (continuing them when resuming); `tap`: the console's live view of
    the annotated video."""
    from ..track.export import TrackSink

    out.mkdir(parents=True, exist_ok=True)
    o = cfg.outputs
    model_ids = {task: m.source for task, m in cfg.enabled_models().items()}
    sinks: list[Sink] = []
    if o.jsonl.enabled:
        sinks.append(JsonlSink(out / o.jsonl.name, source.source_id, model_ids, append=resume is not None))
    if o.video.enabled:
        sinks.append(VideoSink(out / o.video.name, source.fps, o.video, source.audio_path, resume, background, tap))
    if cfg.models.matting is not None and (o.matting.composite or o.matting.alpha):
        sinks.append(MattingSink(out, source.fps, o.matting, o.video, resume, background))
    geometry_tasks = {t for t in ("normal", "pointmap") if getattr(cfg.models, t) is not None}
    g = o.geometry
    if geometry_tasks and (g.normals_video or g.depth_video or g.maps):
        sinks.append(GeometrySink(out, source.fps, g, o.video, resume, geometry_tasks))
    if o.tracks.enabled:
        tracks = TrackSink(out / "tracks", o.tracks.formats, cfg.smoothing)
        if resume is not None:
            tracks.seed(resume.records)
        sinks.append(tracks)
    return sinks


class Fenced(Exception):
    """This process may no longer write a source's files: the source was given to another worker."""


def make_sinks(cfg: PipelineConfig, source, on_quit, resume=None, mqtt=None, fence=None, tap=None) -> list[Sink]:
    """The sinks the configuration asks for: the files under outputs.dir (rolled into segment folders with
    outputs.segment_s), then the outputs that live for the whole run: the display window, the re-stream and the
    MQTT messages (through the process's shared client `mqtt`). `fence(folder)`, when given, is asked before
    every folder of files is opened (raising `Fenced` when this process may no longer write there). `tap`: the
    console's live view, fed by the annotated video's recorder."""
    from .display import DisplaySink
    from .mqtt import MqttSink
    from .restream import RestreamSink
    from .segments import Segments

    o = cfg.outputs
    background = matting_background(o.matting.background) if cfg.models.matting is not None else GREEN_SCREEN
    Path(o.dir).mkdir(parents=True, exist_ok=True)
    def files(folder: Path, resumed=None) -> list[Sink]:
        if fence is not None:
            fence(folder)
        return file_sinks(cfg, source, folder, background, resumed, tap)

    sinks = [Segments(o, files)] if o.segment_s is not None else files(Path(o.dir), resume)
    shown = lambda r: annotated(r, o.video.draw, o.video.keypoint_threshold, background)  # noqa: E731
    name = cfg.source.name or cfg.name
    if o.display:
        if cfg.models.matting is not None:
            render = lambda r: matte_composite(r, background) if r.alpha is not None else r.frame.rgb  # noqa: E731
        else:
            render = shown
        sinks.append(DisplaySink(render, on_quit))
    if o.stream.url:
        sinks.append(RestreamSink(o.stream.url.replace("{source}", name), source.fps, o.stream, shown))
    if mqtt is not None:
        sinks.append(MqttSink(mqtt, name, source))
    return sinks
