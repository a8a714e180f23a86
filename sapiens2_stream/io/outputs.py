"""The outputs (sinks) as one registry, `SINKS` (`sapiens2-stream list sinks`): each kind says its scope, YAML
section and what it writes, and makes its sink from a `SinkContext` when the configuration asks for it. The
`files` kinds and users' own (`outputs.sinks`) write into the output folder or each segment folder, continue with
--resume and are fenced on a fleet; the `run` kinds live for the whole run (window, re-stream, MQTT).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2

from ..config import PipelineConfig
from ..errors import Sapiens2StreamError
from ..models import task_spec
from ..user_stages import stage_object
from .display import DisplaySink
from .jsonl import EventLog, JsonlSink
from .mqtt import MqttSink
from .restream import RestreamSink
from .segments import Segments
from .sink import Sink
from .track_files import TrackSink
from .user_sinks import UserSink
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
    """What the outputs can say is wrong before any is opened: an output folder that is a file (or lies under
    one), a matting background that cannot be read, a virtual camera that cannot exist here."""
    folder = Path(cfg.outputs.dir).expanduser().absolute()
    blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise Sapiens2StreamError(f"outputs.dir {cfg.outputs.dir}: {blocking} is a file, not a folder")
    if cfg.models.matting is not None:
        matting_background(cfg.outputs.matting.background)
    if cfg.outputs.virtual_camera.enabled:
        open_camera_module(cfg.outputs.virtual_camera.backend)
    users_sinks(cfg)  # a class that cannot be imported or refuses its options


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


@dataclass
class SinkContext:
    """What a sink kind is made from: the source's (single-source) configuration, the source, the run's share
    (`setup`), the matting background; for the `files` kinds also the folder they write into (the output folder or
    a segment's) and the interrupted run they continue there (None: a new file)."""

    cfg: PipelineConfig
    source: object
    setup: SinkSetup
    background: object
    folder: Path | None = None
    resume: object = None

    def shown(self, result):
        """The annotated picture of a result (boxes, skeletons, parts), as the video draws it."""
        o = self.cfg.outputs.video
        return annotated(result, layers(o), o.keypoint_threshold, self.background)

    def render(self, result):
        """What a person looks at: the matting composite when matting runs, else the annotated picture."""
        if self.cfg.models.matting is not None:
            return matte_composite(result, self.background) if result.alpha is not None else result.frame.rgb
        return self.shown(result)


@dataclass(frozen=True)
class SinkKind:
    """A kind of output: `files` kinds write into the output folder (each segment's with outputs.segment_s),
    continue with --resume and are fenced on a fleet; `run` kinds live for the whole run (a window, a stream, a
    broker). `make(ctx)` gives the sink, or None when the configuration does not ask for it."""

    name: str
    scope: str  # "files" or "run"
    section: str  # the YAML section it reads
    doc: str  # one line, for `list sinks`
    make: Callable[[SinkContext], Sink | None]


def _jsonl(ctx: SinkContext) -> Sink | None:
    o = ctx.cfg.outputs.jsonl
    if not o.enabled:
        return None
    model_ids = {task: m.source for task, m in ctx.cfg.enabled_models().items()}
    return JsonlSink(ctx.folder / o.name, ctx.source.source_id, model_ids, append=ctx.resume is not None)


def _events(ctx: SinkContext) -> Sink | None:
    return EventLog(ctx.folder / "events.jsonl", ctx.shown, append=ctx.resume is not None) if ctx.cfg.events else None


def _video(ctx: SinkContext) -> Sink | None:
    o, source = ctx.cfg.outputs.video, ctx.source
    if not o.enabled:
        return None
    return VideoSink(ctx.folder / o.name, source.fps, o, source.audio_path, ctx.resume, ctx.background,
                     ctx.setup.feed)  # fmt: skip


def _matting(ctx: SinkContext) -> Sink | None:
    o = ctx.cfg.outputs
    if ctx.cfg.models.matting is None or not (o.matting.composite or o.matting.alpha):
        return None
    return MattingSink(ctx.folder, ctx.source.fps, o.matting, o.video, ctx.resume, ctx.background)


def _geometry(ctx: SinkContext) -> Sink | None:
    tasks = {t for t in ctx.cfg.enabled_models() if task_spec(t).geometry}
    o = ctx.cfg.outputs
    g = o.geometry
    if not tasks or not (g.normals_video or g.depth_video or g.maps):
        return None
    return GeometrySink(ctx.folder, ctx.source.fps, g, o.video, ctx.resume, tasks)


def _tracks(ctx: SinkContext) -> Sink | None:
    o = ctx.cfg.outputs.tracks
    if not o.enabled:
        return None
    tracks = TrackSink(ctx.folder / "tracks", o.formats, ctx.cfg.smoothing)
    if ctx.resume is not None:
        tracks.seed(ctx.resume.records)
    return tracks


def _live_view(ctx: SinkContext) -> Sink | None:
    o = ctx.cfg.outputs.video
    return None if o.enabled else LiveViewSink(ctx.source.fps, o, ctx.background, ctx.setup.feed)


def _display(ctx: SinkContext) -> Sink | None:
    return DisplaySink(ctx.render, ctx.setup.on_quit) if ctx.cfg.outputs.display else None


def _virtual_camera(ctx: SinkContext) -> Sink | None:
    vc, source = ctx.cfg.outputs.virtual_camera, ctx.source
    if not vc.enabled:
        return None
    rate = lambda: camera_fps(vc.fps, source.fps or source.rate)  # noqa: E731  (a live source: once open)
    return VirtualCameraSink(ctx.render, rate, vc.device, vc.backend)


def _restream(ctx: SinkContext) -> Sink | None:
    o = ctx.cfg.outputs.stream
    if not o.url:
        return None
    name = ctx.cfg.source.name or ctx.cfg.name
    return RestreamSink(o.url.replace("{source}", name), ctx.source.fps, o, ctx.shown)


def _mqtt(ctx: SinkContext) -> Sink | None:
    mqtt = ctx.setup.mqtt
    return None if mqtt is None else MqttSink(mqtt, ctx.cfg.source.name or ctx.cfg.name, ctx.source)


def _webhooks(ctx: SinkContext) -> Sink | None:  # for the whole run, not per segment: one sending thread
    o = ctx.cfg.outputs.webhooks
    return WebhookSink(o) if ctx.cfg.events and o.urls else None


# The built-in outputs in the order each result reaches them: the files first (records before pictures), then what
# lives for the whole run. `sapiens2-stream list sinks` prints this table; users' own (`outputs.sinks`) follow the
# built-in files.
SINKS: dict[str, SinkKind] = {kind.name: kind for kind in (
    SinkKind("jsonl", "files", "outputs.jsonl", "one JSON record per frame: people, keypoints, scores, extras", _jsonl),
    SinkKind("events", "files", "events", "events.jsonl: zone, line, dwell, crowd and pose events, a snapshot each",
             _events),
    SinkKind("video", "files", "outputs.video", "the annotated video (boxes, ids, skeletons, parts)", _video),
    SinkKind("matting", "files", "outputs.matting", "the matting composite and alpha videos", _matting),
    SinkKind("geometry", "files", "outputs.geometry", "normal and depth videos, and per-frame maps on request",
             _geometry),
    SinkKind("tracks", "files", "outputs.tracks", "per-track files (npz, parquet, TRC), smoothed over the whole track",
             _tracks),
    SinkKind("live_view", "run", "outputs.video", "the annotated video for live views, drawn only while watched, "
             "when no annotated video is written", _live_view),
    SinkKind("display", "run", "outputs.display", "a window with the newest result (q ends the run)", _display),
    SinkKind("virtual_camera", "run", "outputs.virtual_camera", "a virtual webcam other programs read",
             _virtual_camera),
    SinkKind("stream", "run", "outputs.stream", "the annotated video re-streamed to a media server (RTMP, RTSP)",
             _restream),
    SinkKind("mqtt", "run", "outputs.mqtt", "each frame's people, events and counts as MQTT messages", _mqtt),
    SinkKind("webhooks", "run", "outputs.webhooks", "each event POSTed (signed) to HTTP receivers", _webhooks),
)}  # fmt: skip


def users_sinks(cfg: PipelineConfig) -> list:
    """The objects of `outputs.sinks` (made once; each opens a state per folder it writes into)."""
    return [stage_object(entry, f"outputs.sinks[{i}]") for i, entry in enumerate(cfg.outputs.sinks)]


def make_sinks(cfg: PipelineConfig, source, setup: SinkSetup) -> list[Sink]:
    """The sinks the configuration asks for: the `files` kinds and users' own in the output folder (rolled into
    segment folders with outputs.segment_s), then the `run` kinds."""
    fence, o = setup.fence, cfg.outputs
    background = matting_background(o.matting.background) if cfg.models.matting is not None else GREEN_SCREEN
    Path(o.dir).mkdir(parents=True, exist_ok=True)
    own = users_sinks(cfg)

    def files(folder: Path, resumed=None) -> list[Sink]:
        if fence is not None:
            fence(folder)
        folder.mkdir(parents=True, exist_ok=True)
        ctx = SinkContext(cfg, source, setup, background, folder, resumed)
        made = [kind.make(ctx) for kind in SINKS.values() if kind.scope == "files"]
        append = resumed is not None
        made += [UserSink(obj, entry.name, folder, append) for obj, entry in zip(own, o.sinks, strict=True)]
        return [sink for sink in made if sink is not None]

    sinks = [Segments(o, files)] if o.segment_s is not None else files(Path(o.dir), setup.resume)
    ctx = SinkContext(cfg, source, setup, background)
    run = [kind.make(ctx) for kind in SINKS.values() if kind.scope == "run"]
    return sinks + [sink for sink in run if sink is not None]
