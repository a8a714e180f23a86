"""Which outputs a configuration asks for, assembled in one place: the files of an output folder (or of each
segment folder), then the outputs that live for the whole run (window, re-stream, MQTT).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2

from ..config import PipelineConfig
from ..errors import Sapiens2StreamError
from ..models import task_spec
from .display import DisplaySink
from .jsonl import EventLog, JsonlSink
from .mqtt import MqttSink
from .restream import RestreamSink
from .segments import Segments
from .sink import Sink
from .track_files import TrackSink
from .video_feed import VideoFeed
from .video_sinks import (
    GREEN_SCREEN,
    GeometrySink,
    LiveViewSink,
    MattingSink,
    VideoSink,
    annotated,
    layers,
    matte_composite,
)
from .virtualcam import VirtualCameraSink, camera_fps, open_camera_module
from .webhooks import WebhookSink


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


def matting_background(background):
    """The configured background: an (r, g, b) colour, "blur", or an image file read once."""
    if isinstance(background, str) and background != "blur":
        img = cv2.imread(background, cv2.IMREAD_COLOR)
        if img is None:
            raise Sapiens2StreamError(f"outputs.matting.background: cannot read image {background!r}")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return tuple(background) if isinstance(background, (list, tuple)) else background


def check_sinks(cfg: PipelineConfig) -> None:
    """What the outputs can say is wrong before any is opened: a matting background that cannot be read, a virtual
    camera that cannot exist here."""
    if cfg.models.matting is not None:
        matting_background(cfg.outputs.matting.background)
    if cfg.outputs.virtual_camera.enabled:
        open_camera_module(cfg.outputs.virtual_camera.backend)


@dataclass
class SinkSetup:
    """What a source's sinks share with the run: `feed` (the annotated video offered to live views), `on_quit` (the
    display window asks the run to end), `resume` (the interrupted run continued, or None), `mqtt` (the process's
    client, when outputs.mqtt is on) and `fence(folder)` (asked before any folder of files is opened, raising
    `Fenced` when this process may no longer write there; None: always allowed)."""

    feed: VideoFeed
    on_quit: Callable[[], None]
    resume: object = None
    mqtt: object = None
    fence: Callable[[Path], None] | None = None


def file_sinks(cfg: PipelineConfig, source, out: Path, background, resume, feed: VideoFeed) -> list[Sink]:
    """The sinks that write files into `out` (continuing them when resuming); the annotated video offered to
    `feed`."""
    out.mkdir(parents=True, exist_ok=True)
    o = cfg.outputs
    model_ids = {task: m.source for task, m in cfg.enabled_models().items()}
    sinks: list[Sink] = []
    if o.jsonl.enabled:
        sinks.append(JsonlSink(out / o.jsonl.name, source.source_id, model_ids, append=resume is not None))
    if cfg.events:
        picture = lambda r: annotated(r, layers(o.video), o.video.keypoint_threshold, background)  # noqa: E731
        sinks.append(EventLog(out / "events.jsonl", picture, append=resume is not None))
    if o.video.enabled:
        sinks.append(VideoSink(out / o.video.name, source.fps, o.video, source.audio_path, resume, background, feed))
    if cfg.models.matting is not None and (o.matting.composite or o.matting.alpha):
        sinks.append(MattingSink(out, source.fps, o.matting, o.video, resume, background))
    geometry_tasks = {t for t in cfg.enabled_models() if task_spec(t).geometry}
    g = o.geometry
    if geometry_tasks and (g.normals_video or g.depth_video or g.maps):
        sinks.append(GeometrySink(out, source.fps, g, o.video, resume, geometry_tasks))
    if o.tracks.enabled:
        tracks = TrackSink(out / "tracks", o.tracks.formats, cfg.smoothing)
        if resume is not None:
            tracks.seed(resume.records)
        sinks.append(tracks)
    return sinks


def make_sinks(cfg: PipelineConfig, source, setup: SinkSetup) -> list[Sink]:
    """The sinks the configuration asks for: the files under outputs.dir (rolled into segment folders with
    outputs.segment_s), the live view's video when no annotated video is written, then the outputs that live for
    the whole run: the display window, the virtual camera, the re-stream, the MQTT messages and the webhooks."""
    fence, resume, mqtt, feed = setup.fence, setup.resume, setup.mqtt, setup.feed
    o = cfg.outputs
    background = matting_background(o.matting.background) if cfg.models.matting is not None else GREEN_SCREEN
    Path(o.dir).mkdir(parents=True, exist_ok=True)

    def files(folder: Path, resumed=None) -> list[Sink]:
        if fence is not None:
            fence(folder)
        return file_sinks(cfg, source, folder, background, resumed, feed)

    sinks = [Segments(o, files)] if o.segment_s is not None else files(Path(o.dir), resume)
    if not o.video.enabled:  # a live view's video, drawn and encoded only while someone watches
        sinks.append(LiveViewSink(source.fps, o.video, background, feed))
    shown = lambda r: annotated(r, layers(o.video), o.video.keypoint_threshold, background)  # noqa: E731
    name = cfg.source.name or cfg.name
    if cfg.models.matting is not None:  # what a person looks at: the composite, else the annotated picture
        render = lambda r: matte_composite(r, background) if r.alpha is not None else r.frame.rgb  # noqa: E731
    else:
        render = shown
    if o.display:
        sinks.append(DisplaySink(render, setup.on_quit))
    vc = o.virtual_camera
    if vc.enabled:
        rate = lambda: camera_fps(vc.fps, source.fps or source.rate)  # noqa: E731  (a live source: once open)
        sinks.append(VirtualCameraSink(render, rate, vc.device, vc.backend))
    if o.stream.url:
        sinks.append(RestreamSink(o.stream.url.replace("{source}", name), source.fps, o.stream, shown))
    if mqtt is not None:
        sinks.append(MqttSink(mqtt, name, source))
    if cfg.events and o.webhooks.urls:  # for the whole run, not per segment: one sending thread
        sinks.append(WebhookSink(o.webhooks))
    return sinks
