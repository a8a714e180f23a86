"""The outputs (sinks) as one registry, `registry.SINKS` (`sapiens2-stream list sinks`): each kind says its scope, YAML
section, the class of its options (the `outputs:` section is assembled from them, on `OutputsBase`) and what it
writes, and makes its sink from a `SinkContext` when the configuration asks for it. The
`files` kinds and users' own (`outputs.sinks`) write into the output folder or each segment folder, continue with
--resume and are fenced on a fleet; the `run` kinds live for the whole run (window, re-stream, MQTT).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2

from ..config import Switch
from ..errors import Sapiens2StreamError
from ..models import task_spec
from ..registry import SINKS, Row
from ..track.options import SmoothingConfig
from ..user_stages import stage_object
from .display import DisplaySink
from .jsonl import EventLog, JsonlSink
from .mqtt import MqttSink
from .options import (
    EventLogOutput,
    GeometryOutput,
    JsonlOutput,
    MattingVideos,
    MqttOutput,
    StreamOutput,
    TracksOutput,
    VideoOutput,
    VirtualCameraOutput,
    WebhooksOutput,
)
from .restream import RestreamSink
from .segments import Segments
from .sink import Sink
from .stage_files import FileOutbox, StageFilesSink
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


@dataclass(frozen=True)
class SinkInputs:
    """What the outputs read besides their own section: the models that run (task -> hub id, folder or file),
    whether any event rule is given, the track smoothing (per-track files), and the source's name."""

    models: dict[str, str]
    events: bool = False
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)
    label: str = ""


def video_names(outputs: Any, models: dict) -> list[str]:
    """The videos these outputs write into the output folder, with these models running."""
    o = outputs
    wanted = [
        (o.video.name, o.video.enabled),
        (o.matting.composite_name, "matting" in models and o.matting.composite),
        (o.matting.alpha_name, "matting" in models and o.matting.alpha),
        (o.geometry.normals_name, "normal" in models and o.geometry.normals_video),
        (o.geometry.depth_name, "pointmap" in models and o.geometry.depth_video),
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


def check_sinks(outputs: Any, models: dict) -> None:
    """What the outputs can say is wrong before any is opened: an output folder that is a file (or lies under
    one), a matting background that cannot be read, a virtual camera that cannot exist here."""
    folder = Path(outputs.dir).expanduser().absolute()
    blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise Sapiens2StreamError(f"outputs.dir {outputs.dir}: {blocking} is a file, not a folder")
    if "matting" in models:
        matting_background(outputs.matting.background)
    if outputs.virtual_camera.enabled:
        open_camera_module(outputs.virtual_camera.backend)
    users_sinks(outputs)  # a class that cannot be imported or refuses its options


@dataclass
class SinkSetup:
    """What a source's sinks share with the run: `feed` (the annotated video offered to live views), `on_quit` (the
    display window asks the run to end), `resume` (the interrupted run continued, or None), `mqtt` (the process's
    client, when outputs.mqtt is on), `fence(folder)` (asked before any folder of files is opened, raising
    `Fenced` when this process may no longer write there; None: always allowed) and `files` (the files the
    source's stages hand over, `io.stage_files`)."""

    feed: VideoFeed
    on_quit: Callable[[], None]
    resume: object = None
    mqtt: object = None
    fence: Callable[[Path], None] | None = None
    files: FileOutbox = field(default_factory=FileOutbox)


@dataclass
class SinkContext:
    """What a sink kind is made from: the `outputs:` section, what else it reads (`inputs`), the source, the run's
    share (`setup`), the matting background; for the `files` kinds also the folder they write into (the output
    folder or a segment's) and the interrupted run they continue there (None: a new file)."""

    outputs: Any
    inputs: SinkInputs
    source: object
    setup: SinkSetup
    background: object
    folder: Path | None = None
    resume: object = None

    def shown(self, result):
        """The annotated picture of a result (boxes, skeletons, parts), as the video draws it."""
        o = self.outputs.video
        return annotated(result, layers(o), o.keypoint_threshold, self.background)

    def render(self, result):
        """What a person looks at: the matting composite when matting runs, else the annotated picture."""
        if "matting" in self.inputs.models:
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
    doc: str  # one line, for `list sinks` (and the section's description in the schema)
    make: Callable[[SinkContext], Sink | None]
    options: Any = None  # its section's type, as io/options.py declares it (None: another component's section)
    files_off: dict[str, Any] = field(default_factory=dict)  # keys of its section, and values, with which it writes
    # no file: the Python API's `output=None` sets them

    def listing(self) -> Row:
        place = "after the files" if self.scope == "run" else "output folder"
        return self.name, self.scope, place, self.section, self.doc


def _jsonl(ctx: SinkContext) -> Sink | None:
    o = ctx.outputs.jsonl
    if not o.enabled:
        return None
    return JsonlSink(ctx.folder / o.name, ctx.source.source_id, dict(ctx.inputs.models), append=ctx.resume is not None)


def _events(ctx: SinkContext) -> Sink | None:
    if not ctx.inputs.events or not ctx.outputs.event_log.enabled:
        return None
    return EventLog(ctx.folder / "events.jsonl", ctx.shown, append=ctx.resume is not None)


def _video(ctx: SinkContext) -> Sink | None:
    o, source = ctx.outputs.video, ctx.source
    if not o.enabled:
        return None
    return VideoSink(ctx.folder / o.name, source.fps, o, source.audio_path, ctx.resume, ctx.background,
                     ctx.setup.feed)  # fmt: skip


def _matting(ctx: SinkContext) -> Sink | None:
    o = ctx.outputs
    if "matting" not in ctx.inputs.models or not (o.matting.composite or o.matting.alpha):
        return None
    return MattingSink(ctx.folder, ctx.source.fps, o.matting, o.video, ctx.resume, ctx.background)


def _geometry(ctx: SinkContext) -> Sink | None:
    tasks = {t for t in ctx.inputs.models if task_spec(t).geometry}
    o = ctx.outputs
    g = o.geometry
    if not tasks or not (g.normals_video or g.depth_video or g.maps):
        return None
    return GeometrySink(ctx.folder, ctx.source.fps, g, o.video, ctx.resume, tasks)


def _tracks(ctx: SinkContext) -> Sink | None:
    o = ctx.outputs.tracks
    if not o.enabled:
        return None
    tracks = TrackSink(ctx.folder / "tracks", o.formats, ctx.inputs.smoothing)
    if ctx.resume is not None:
        tracks.seed(ctx.resume.records)
    return tracks


def _stage_files(ctx: SinkContext) -> Sink:
    return StageFilesSink(ctx.folder, ctx.setup.files)


def _live_view(ctx: SinkContext) -> Sink | None:
    o = ctx.outputs.video
    return None if o.enabled else LiveViewSink(ctx.source.fps, o, ctx.background, ctx.setup.feed)


def _display(ctx: SinkContext) -> Sink | None:
    return DisplaySink(ctx.render, ctx.setup.on_quit) if ctx.outputs.display else None


def _virtual_camera(ctx: SinkContext) -> Sink | None:
    vc, source = ctx.outputs.virtual_camera, ctx.source
    if not vc.enabled:
        return None
    rate = lambda: camera_fps(vc.fps, source.fps or source.rate)  # noqa: E731  (a live source: once open)
    return VirtualCameraSink(ctx.render, rate, vc.device, vc.backend)


def _restream(ctx: SinkContext) -> Sink | None:
    o = ctx.outputs.stream
    if not o.url:
        return None
    return RestreamSink(o.url.replace("{source}", ctx.inputs.label), ctx.source.fps, o, ctx.shown)


def _mqtt(ctx: SinkContext) -> Sink | None:
    mqtt = ctx.setup.mqtt
    return None if mqtt is None else MqttSink(mqtt, ctx.inputs.label, ctx.source)


def _webhooks(ctx: SinkContext) -> Sink | None:  # for the whole run, not per segment: one sending thread
    o = ctx.outputs.webhooks
    return WebhookSink(o) if ctx.inputs.events and o.urls else None


# The built-in outputs in the order each result reaches them: the files first (records before pictures), then what
# lives for the whole run. `sapiens2-stream list sinks` prints this table; users' own (`outputs.sinks`) follow the
# built-in files.
SINKS.add(SinkKind("jsonl", "files", "outputs.jsonl", "one JSON record per frame: people, keypoints, scores, extras",
                   _jsonl, JsonlOutput, {"enabled": False}))  # fmt: skip
SINKS.add(SinkKind("events", "files", "outputs.event_log", "events.jsonl: zone, line, dwell, crowd and pose "
                   "events, a snapshot each", _events, EventLogOutput, {"enabled": False}))  # fmt: skip
SINKS.add(SinkKind("video", "files", "outputs.video", "the annotated video (boxes, ids, skeletons, parts)",
                   _video, VideoOutput, {"enabled": False}))  # fmt: skip
SINKS.add(SinkKind("matting", "files", "outputs.matting", "the matting composite and alpha videos",
                   _matting, MattingVideos, {"composite": False}))  # fmt: skip
SINKS.add(SinkKind("geometry", "files", "outputs.geometry", "normal and depth videos, and per-frame maps on request",
                   _geometry, GeometryOutput, {"normals_video": False, "depth_video": False}))  # fmt: skip
SINKS.add(SinkKind("tracks", "files", "outputs.tracks", "per-track files (npz, parquet, TRC), smoothed over the "
                   "whole track", _tracks, TracksOutput))  # fmt: skip
SINKS.add(SinkKind("stage_files", "files", "outputs", "the files the stages make (a track's angles when it ends), in "
                   "the folder being written", _stage_files))  # fmt: skip
SINKS.add(SinkKind("live_view", "run", "outputs.video", "the annotated video for live views, drawn only while "
                   "watched, when no annotated video is written", _live_view))  # fmt: skip
SINKS.add(SinkKind("display", "run", "outputs.display", "a window with the newest result (q or closing it ends "
                   "the run)", _display, Switch))  # fmt: skip
SINKS.add(SinkKind("virtual_camera", "run", "outputs.virtual_camera", "a virtual webcam other programs read",
                   _virtual_camera, VirtualCameraOutput))  # fmt: skip
SINKS.add(SinkKind("stream", "run", "outputs.stream", "the annotated video re-streamed to a media server (RTMP, "
                   "RTSP)", _restream, StreamOutput))  # fmt: skip
SINKS.add(SinkKind("mqtt", "run", "outputs.mqtt", "each frame's people, events and counts as MQTT messages",
                   _mqtt, MqttOutput))  # fmt: skip
SINKS.add(SinkKind("webhooks", "run", "outputs.webhooks", "each event POSTed (signed) to HTTP receivers",
                   _webhooks, WebhooksOutput))  # fmt: skip


def users_sinks(outputs: Any) -> list:
    """The objects of `outputs.sinks` (made once; each opens a state per folder it writes into)."""
    return [stage_object(entry, f"outputs.sinks[{i}]") for i, entry in enumerate(outputs.sinks)]


def make_sinks(outputs: Any, inputs: SinkInputs, source, setup: SinkSetup) -> list[Sink]:
    """The sinks the `outputs:` section asks for: the `files` kinds and users' own in the output folder (rolled
    into segment folders with outputs.segment_s), then the `run` kinds."""
    fence, o = setup.fence, outputs
    background = matting_background(o.matting.background) if "matting" in inputs.models else GREEN_SCREEN
    Path(o.dir).mkdir(parents=True, exist_ok=True)
    own = users_sinks(o)

    def files(folder: Path, resumed=None) -> list[Sink]:
        if fence is not None:
            fence(folder)
        folder.mkdir(parents=True, exist_ok=True)
        ctx = SinkContext(o, inputs, source, setup, background, folder, resumed)
        made = [kind.make(ctx) for kind in SINKS.values() if kind.scope == "files"]
        append = resumed is not None
        made += [UserSink(obj, entry.name, folder, append) for obj, entry in zip(own, o.sinks, strict=True)]
        return [sink for sink in made if sink is not None]

    sinks = [Segments(o, files)] if o.segment_s is not None else files(Path(o.dir), setup.resume)
    ctx = SinkContext(o, inputs, source, setup, background)
    run = [kind.make(ctx) for kind in SINKS.values() if kind.scope == "run"]
    return sinks + [sink for sink in run if sink is not None]
