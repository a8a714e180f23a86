"""The pipeline YAML: schema, loading, overrides and error messages that name the key and the fix.

The schema is the dataclasses below (pydantic dataclasses: types, bounds, `extra="forbid"`); `from_dict` validates
a parsed YAML mapping against them with pydantic, strictly as JSON Schema reads it (no string taken for a number),
and says the first problem in one line: the dotted key, what was expected, a did-you-mean for unknown keys. The
same models give the JSON Schema (`sapiens2-stream schema`, `sapiens2_stream.schema`) and the docs' YAML
reference. YAML is read with the safe loader only; `${VAR}`-free: what the file says is what runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import re
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BeforeValidator, ConfigDict, Field

from .errors import Sapiens2StreamError
from .models.metadata import pose_metadata
from .models.tasks import pipeline_tasks

DEFAULT_FPS = 30.0  # the frame rate assumed where a source does not say (image folders, streams without a rate,
# the Python API's pictures)

SCHEMA = ConfigDict(extra="forbid")  # every section: unknown keys refused


def dataclass(cls: type) -> type:
    """A section of the schema: a plain dataclass (made as any, `replace`d as any) that pydantic validates, unknown
    keys refused, when a YAML is read (`from_dict`). Plain rather than pydantic's own dataclasses: the schema is
    built once, when first needed, not class by class at import (`validate` stays quick)."""
    if not dataclasses.is_dataclass(cls):
        cls = dataclasses.dataclass(cls)
    cls.__pydantic_config__ = SCHEMA
    return cls


def yaml_key(f: dataclasses.Field) -> str:
    """A field's key as the YAML spells it (an alias where the name is Python's: `in`, `out`)."""
    return f.metadata.get("alias", f.name)


def on_off(value: Any) -> Any:
    """YAML 1.1 reads a bare on/off as a boolean; a switch takes it as "on" / "off"."""
    return ("on" if value else "off") if isinstance(value, bool) else value


def as_bool(value: Any) -> Any:
    """A true/false switch also takes "on" / "off" (what the other switches say)."""
    return {"on": True, "off": False}.get(value, value) if isinstance(value, str) else value


AtLeast0 = Annotated[float, Field(ge=0)]
Above0 = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=0, le=65535)]
Switch = Annotated[bool | Literal["on", "off"], BeforeValidator(as_bool)]  # (YAML 1.2 editors read on as "on")

Points = list[Annotated[list[float], Field(min_length=2, max_length=2)]]
ANCHORS = ("feet", "hips", "box_bottom", "center")  # where a person is, besides any keypoint by name


def check_anchor(anchor: str) -> None:
    if anchor not in ANCHORS and anchor not in pose_metadata().names:
        raise ValueError(f".anchor: {anchor!r} is not one of {', '.join(ANCHORS)} or a keypoint")


def crosses_itself(polygon: list) -> bool:
    """Whether two edges of a polygon that are not neighbours cross."""
    edges = list(zip(polygon, [*polygon[1:], polygon[0]], strict=True))

    def side(a, b, c) -> int:
        cross = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return (cross > 0) - (cross < 0)

    for i, (a, b) in enumerate(edges):
        for j, (c, d) in enumerate(edges):
            if abs(i - j) > 1 and {i, j} != {0, len(edges) - 1}:
                if side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0:
                    return True
    return False


@dataclass
class ZoneConfig:
    """A zone (`events.zones.NAME`): who enters, leaves, stays and how many are inside."""

    polygon: Points | None = None  # [x, y] corners: pixels, or 0-1 of the frame when every value is within [0, 1]
    floor_m: Points | None = None  # instead of polygon: [X, Y] corners in metres on the floor (the 3-D stage's
    # world frame): a person is where their feet stand
    anchor: str = "feet"  # where a person is: feet, hips, box_bottom, center or a keypoint's name
    loitering_s: AtLeast0 | None = None  # a `loitering` event once per visit longer than this
    max_people: Annotated[int, Field(ge=0)] | None = None  # `crowded` when more are inside, `cleared` after
    min_s: AtLeast0 = 0.3  # the hysteresis: inside (or outside) this long before it counts

    def __post_init__(self) -> None:
        """The outline's own checks (said as `events.zones.NAME...` by `from_dict`)."""
        if self.polygon is not None and self.floor_m is not None:
            raise ValueError(": give polygon (the picture) or floor_m (metres), not both")
        key = "floor_m" if self.floor_m is not None else "polygon"
        corners = getattr(self, key)
        if corners is None or len(corners) < 3:
            raise ValueError(f".{key}: expected at least 3 [x, y] points")
        if crosses_itself(corners):
            raise ValueError(f".{key}: its edges cross each other")
        check_anchor(self.anchor)


@dataclass
class LineConfig:
    """A line (`events.lines.NAME`): crossings in both directions."""

    points: Points | None = None  # [[x, y], [x, y]]: start and end (pixels or 0-1 of the frame)
    anchor: str = "feet"  # where a person is (as for zones)
    in_name: str = field(default="in", metadata={"alias": "in"})  # what a crossing from the right of start->end to
    # its left is called
    out_name: str = field(default="out", metadata={"alias": "out"})  # and the other way
    min_s: AtLeast0 = 0.2  # on the other side this long before it counts
    margin_px: AtLeast0 = 4.0  # a dead band either side of the line (pixels): standing on it counts nothing

    def __post_init__(self) -> None:
        if self.points is None or len(self.points) < 2:
            raise ValueError(".points: expected at least 2 [x, y] points")
        check_anchor(self.anchor)


@dataclass
class LyingConfig:
    """`events.poses.lying`: someone down on the floor (after a fall the camera missed, or after lying down)."""

    after_s: AtLeast0 = 10.0  # how long the trunk lies, continuously, before `lying` is said


def switched_section(value: Any) -> Any:
    """A section that `on` / true switches on with its defaults and `off` / false switches off."""
    value = as_bool(value)
    return ({} if value else None) if isinstance(value, bool) else value


LyingSwitch = Annotated[
    LyingConfig | None,
    BeforeValidator(switched_section, json_schema_input_type=LyingConfig | bool | Literal["on", "off"] | None),
]


@dataclass
class PosesConfig:
    """Poses (`events.poses`): falls, people lying and hands up, from the smoothed keypoints."""

    fall: Switch = False  # a `fall`: the trunk from upright to lying, the hips dropping, within fall_s
    hands_up: Switch = False  # `hands_up`: both wrists above the nose for hands_s
    lying: LyingSwitch = None  # `lying` after after_s down, `up` (seconds down) when they rise or leave; on: 10 s
    fall_s: Above0 = 1.2  # how fast the trunk goes down in a fall
    down_s: AtLeast0 = 0.6  # how long it stays down before the fall is said
    hands_s: AtLeast0 = 0.5  # how long the hands stay up before it is said

    def any(self) -> bool:
        return self.fall or self.hands_up or self.lying is not None


@dataclass
class EventsConfig:
    """Zones, lines and poses (`events:`): events.jsonl, MQTT TOPIC/events, webhooks (the site's page "Events")."""

    zones: dict[str, ZoneConfig] = field(default_factory=dict)  # by name
    lines: dict[str, LineConfig] = field(default_factory=dict)  # by name
    poses: PosesConfig = field(default_factory=PosesConfig)

    def __bool__(self) -> bool:
        """Whether any rule is given (the events stage runs only then)."""
        return bool(self.zones or self.lines or self.poses.any())


@dataclass
class StageConfig:
    """One of your own stages (`stages:`): a class with open(source) -> state, __call__(state, result), close(state)
    (see the site's page "Your own stages")."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]  # the stage's name (times, errors)
    use: str  # module:Class (importable) or path/to/file.py:Class
    after: str = "events"  # the stage it follows: infer, temporal, smooth, threed, events, write or one of yours
    options: dict[str, Any] = field(default_factory=dict)  # given to the class: Class(**options), or Class(options)
    # checked against its `Options` dataclass / model when it has one


@dataclass
class ReconnectConfig:
    initial_s: Above0 = 0.5  # first wait after a drop
    max_s: Above0 = 10.0  # waits double up to this
    give_up_s: Above0 | None = None  # stop after this long without frames (None: never)


@dataclass
class SourceConfig:
    uri: str = ""  # video file, rtsp://..., webcam:0, lavfi:testsrc2=..., a folder or glob of images
    name: str = ""  # several sources: names the output folder OUTPUT/<name>/ (letters, digits, - and _)
    kind: Literal["auto", "file", "stream", "webcam", "images", "lavfi", "frames"] = "auto"  # auto: from the uri
    # (frames: python:<n>, the Python API's own frames)
    width: Count | None = None  # webcam capture size
    height: Count | None = None  # webcam capture size
    fps: Above0 | None = None  # webcam capture rate; the timestamp rate of image folders (default 30)
    timeout_s: Above0 = 5.0  # open and read timeout for streams
    transport: Literal["tcp", "udp"] = "tcp"  # rtsp:// streams: TCP (reliable) or UDP (lower latency, may lose)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    max_frames: Count | None = None  # stop after this many frames
    start_frame: Annotated[int, Field(ge=0)] = 0  # files: skip frames before this index (--resume); live: the first
    # frame's index (a camera continued on another fleet worker keeps its numbering)
    events: EventsConfig | None = None  # this camera's own zones, lines and poses (replacing the pipeline's
    # `events:` for it; each camera has its own picture)


@dataclass
class DetectorConfig:
    type: Literal["yolo", "fixed", "full_frame", "file"] = "yolo"  # fixed: the boxes below; full_frame: one box, the
    # frame; file: the boxes of `path` per frame
    weights: str = "yolo11n.pt"  # a local .pt or a model .yaml (random init) for ultralytics
    conf: Share = 0.3  # the detector's minimum confidence for a person
    iou: Share = 0.5  # non-maximum suppression overlap
    min_size: AtLeast0 = 8.0  # drop boxes whose shorter side is under this many pixels
    max_people: Count = 20  # the most confident boxes kept per frame
    every: Count | Literal["auto"] = 1  # detect every N frames, the tracker carrying boxes in between; auto: every
    # frame while the machine keeps up with a live source, every 3rd while it falls behind
    imgsz: Annotated[int, Field(ge=32)] = 640  # the detector's input size (pixels, longer side)
    boxes: list[Annotated[list[float], Field(min_length=4, max_length=4)]] = field(default_factory=list)  # fixed:
    # COCO xywh boxes
    path: str = ""  # file: a synthetic clip's .truth.json or a MOTChallenge det.txt (frame, id, x, y, w, h, score)


@dataclass
class TrackerConfig:
    iou: Share = 0.3  # minimum IoU to match a detection to a track
    high_score: Share = 0.5  # detections above this are matched first (ByteTrack)
    max_lost_s: AtLeast0 = 1.0  # keep unmatched tracks this long (short occlusions)
    min_hits: Count = 1  # report a track after this many matches


InputSize = Annotated[list[Annotated[int, Field(ge=16)]], Field(min_length=2, max_length=2)]


@dataclass
class ModelSection:
    """One task's model (`models.<task>`)."""

    source: str = ""  # hub id, folder or .safetensors file
    flip: Annotated[Literal["on", "off", "auto"] | bool, BeforeValidator(on_off)] = "auto"  # flip TTA; auto turns
    # it off when a live source falls behind
    max_batch: Count = 8  # crops (pose) or frames (dense tasks) per forward
    input_size: InputSize | None = None  # model input [height, width], multiples of 16; default: the model's own
    # (its config.json image_size: 1024x768 for the released models, what finetune --input-size trained at)
    runtime: Literal["torch", "onnxruntime", "openvino", "tensorrt"] = "torch"  # what runs the model: PyTorch, or
    # the runtime of a folder `export-model` wrote (source:), which runs only with its passing parity.json


# models: one optional section per task of the table (models/tasks.py), in its order
ModelsConfig = dataclass(dataclasses.make_dataclass(
    "ModelsConfig", [(spec.name, ModelSection | None, None) for spec in pipeline_tasks()],
    namespace={"__module__": __name__,
               "__doc__": "One section per task of the table (models/tasks.py); a task without one does not run."},
))  # fmt: skip


@dataclass
class SmoothingConfig:
    """Keypoint smoothing per track, in a run and in `track.smooth_keypoints` alike (the defaults live here only)."""

    method: Literal["none", "kalman", "adaptive", "rts", "one_euro"] = "adaptive"  # see the site's page "Tracks,
    # smoothing and steady video": adaptive (IMM of a steady and a turning filter) is the default everywhere
    params: dict[str, float] = field(default_factory=dict)  # the method's parameters (see the smoothing docs)
    min_score: AtLeast0 = 0.3  # keypoints below this predict only


Mode = Annotated[Literal["auto", "on", "off"] | bool, BeforeValidator(on_off)]  # (YAML 1.1 reads on as true)


@dataclass
class TemporalParameters:
    """What every output's temporal filter shares."""

    new_weight: Annotated[float, Field(gt=0, le=1)] = 0.4  # the new frame's share where the history is trusted (1: no
    # smoothing)
    tau: Above0 = 0.02  # picture difference (0-1 grey) at which the history's trust falls to 1/e
    margin: AtLeast0 = 0.1  # part labels: the probability lead a new class needs to take a pixel from the old one
    flow_width: Annotated[int, Field(ge=32)] = 320  # the optical flow's picture width (pixels)
    width: Annotated[int, Field(ge=32)] = 640  # matte, normals, depth wider than this are filtered at this width, the
    # change enlarged
    seg_width: Annotated[int, Field(ge=16)] = 256  # part labels are steadied on class probabilities this wide (the
    # cost grows with its square)


# temporal: a switch per filtered output of the table's tasks (models/tasks.py), then the shared parameters
TemporalConfig = dataclass(dataclasses.make_dataclass(
    "TemporalConfig", [(spec.temporal.key, Mode, "auto") for spec in pipeline_tasks() if spec.temporal],
    bases=(TemporalParameters,),
    namespace={"__module__": __name__, "__doc__": """The temporal filter (the site's "Steady video"): per output
    `auto` (on for live sources and videos, off for photo folders), `on` or `off`; the parameters are shared by all
    of them."""},
))  # fmt: skip


@dataclass
class MetricsConfig:
    """Prometheus metrics at /metrics and a health check at /healthz."""

    port: Port | None = None  # None: no metrics server
    host: str = "127.0.0.1"  # only this machine, unless you say otherwise


@dataclass
class ServerTls:
    """HTTPS for a server of ours (`runtime.console.tls`): its certificate and private key, PEM files."""

    certfile: str | None = None  # the server's certificate (with its chain); needed
    keyfile: str | None = None  # its private key; needed


@dataclass
class ConsoleConfig:
    """The web console: live views, status, sources added and removed while running (the site's page "The console")."""

    port: Port | None = None  # None: no console (--console PORT)
    host: str = "127.0.0.1"  # only this machine; any other host needs token_env
    token_env: str | None = None  # the environment variable that holds the token every request must bring
    tls: ServerTls | None = None  # serve HTTPS with this certificate (None: plain HTTP)


@dataclass
class RuntimeConfig:
    device: str = "auto"  # auto, cpu, cuda, cuda:1
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA and on CPUs with native bf16
    max_wait_ms: AtLeast0 = 20.0  # how long the take stage waits for more frames to fill a micro-batch
    max_frames_per_batch: Count = 4  # frames per micro-batch (files; live sources take fewer to stay fresh)
    queue_size: Count = 8  # frames waiting per source for the models
    policy: Literal["auto", "block", "latest", "drop_oldest"] = "auto"  # auto: block for files, latest for live
    max_frame_age_s: Above0 = 1.0  # live, unless policy is block: frames waiting longer are dropped before any
    # work (a frame the models took is always finished and written)
    threads: Count | None = None  # torch CPU threads
    compile: Literal["auto", "on", "off"] = "auto"  # torch.compile with batches padded to buckets; auto: CUDA only
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)


@dataclass
class VideoOutput:
    enabled: Switch = True  # the annotated video
    name: str = "annotated.mp4"  # its file name in the output folder
    draw: list[Literal["pose", "seg", "boxes", "matting"]] = field(default_factory=lambda: ["pose", "boxes"])  # layers
    keypoint_threshold: AtLeast0 = 0.3  # keypoints scoring below this are not drawn
    view_3d: Switch = False  # with threed: the people's 3-D skeletons from above and from the side, bottom right
    crf: Annotated[int, Field(ge=0, le=51)] = 23  # x264 quality (lower: better, larger)
    preset: str = "veryfast"  # x264 speed preset
    copy_audio: Switch = True  # the source's soundtrack copied into the video at the end


@dataclass
class JsonlOutput:
    enabled: Switch = True  # one JSON line per frame: people, boxes, keypoints, flags
    name: str = "results.jsonl"  # its file name in the output folder


@dataclass
class TracksOutput:
    enabled: Switch = False  # per-track files in tracks/, smoothed over the whole track
    formats: list[Literal["npz", "parquet", "trc"]] = field(default_factory=lambda: ["npz"])  # any of them


@dataclass
class MattingVideos:
    """What the matting model gives, when it runs: the composite and the matte as videos."""

    composite: Switch = True  # the people over the background, as a video
    background: Any = (0, 177, 64)  # [r, g, b], an image path, or "blur"
    composite_name: str = "composite.mp4"  # (file names in the output folder)
    alpha: Switch = False  # the matte itself, as a grey video
    alpha_name: str = "alpha.mp4"  # (file names in the output folder)


@dataclass
class GeometryOutput:
    """What normal and pointmap models give, when they run: videos to watch, and the maps themselves on request."""

    normals_video: Switch = True  # normals as colours, (n + 1) / 2
    normals_name: str = "normals.mp4"  # (file names in the output folder)
    depth_video: Switch = True  # the pointmap's depth (z) as a colour map, near warm, far cool
    depth_name: str = "depth.mp4"  # (file names in the output folder)
    maps: Switch = False  # maps/frame_NNNNNN.npz: float16 normals and pointmap [H, W, 3] per frame, for 3-D tools


@dataclass
class StreamOutput:
    """Re-stream the annotated video to a media server (RTMP: FLV; RTSP: RECORD)."""

    url: str = ""  # rtmp://host/app/{source} or rtsp://host/path/{source}; empty: no re-stream
    transport: Literal["tcp", "udp"] = "tcp"  # rtsp:// only
    bitrate_kbps: Count = 2500  # the re-stream's video bitrate
    queue: Count = 30  # frames waiting for the server; more are dropped (counted), never waited for
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)


@dataclass
class MqttTls:
    """MQTT over TLS (`outputs.mqtt.tls`, usually port 8883): the broker's certificate verified unless insecure."""

    ca_certs: str | None = None  # the CA that signed the broker's certificate (PEM); None: the system's CAs
    certfile: str | None = None  # our client certificate (PEM), for brokers that ask for one
    keyfile: str | None = None  # its private key
    insecure: Switch = False  # true: do not verify the broker's certificate or name (tests only: anyone can listen)


@dataclass
class MqttOutput:
    """Results and events as MQTT messages (paho-mqtt)."""

    host: str = ""  # empty: no MQTT
    port: Annotated[int, Field(ge=1, le=65535)] = 1883  # the broker's port
    topic: str = "sapiens2/{source}"  # messages go to TOPIC/frames and TOPIC/events
    status_topic: str = "sapiens2/status"  # retained online / offline (the last will)
    qos: Literal[0, 1, 2] = 1  # MQTT delivery guarantee
    keypoints: Literal["coco17", "all", "none"] = "coco17"  # in each frame message: COCO's 17, all 308, or none
    # (boxes only), as [x, y, score]
    username: str | None = None  # the broker's user, if it asks for one
    password_env: str | None = None  # the name of the environment variable that holds the password
    queue: Count = 1000  # messages waiting for the broker; more are dropped (counted), never waited for
    client_id: str = ""  # empty: sapiens2-stream-<pid>
    tls: MqttTls | None = None  # connect over TLS (None: plain TCP)


@dataclass
class WebhooksOutput:
    """Every event (the `events:` section) as an HTTP POST of its JSON, from a queue that never slows the run."""

    urls: list[str] = field(default_factory=list)  # where to POST; empty: no webhooks
    queue: Count = 1000  # events waiting per URL while a receiver is down; more drop the oldest (counted)
    timeout_s: Above0 = 5.0  # one POST's time limit
    max_backoff_s: Above0 = 10.0  # the longest wait between two tries of a failing URL
    drain_s: AtLeast0 = 5.0  # at the end of a run, how long to keep delivering what is still queued
    secret_env: str | None = None  # the environment variable holding the key that signs each POST (HMAC-SHA256)
    ca_certs: str | None = None  # a private CA's certificate (PEM) for https:// receivers; default: the system's


@dataclass
class Pose2SimOutput:
    """With several file sources: write a Pose2Sim project of the take to OUTPUT/pose2sim/ when the run ends."""

    enabled: Switch = False  # write the project when the run ends
    skeleton: Literal["HALPE_26", "COCO_133_WRIST", "COCO_133"] = "HALPE_26"  # Pose2Sim's 2-D skeleton
    calibration: str | None = None  # Calib.toml, cameras named like the sources
    sync: Literal["auto", "motion", "audio", "none"] = "auto"  # auto: the soundtracks when every camera has a clear
    # one, otherwise the people's motion; none: the recordings start together
    fps: Above0 | None = None  # the project's frame rate (default: the first source's)


@dataclass
class RetentionConfig:
    """What happens to closed segments (outputs.segment_s): the oldest are deleted while either limit is passed."""

    max_age_h: Above0 | None = None  # closed segments older than this many hours
    max_gb: Above0 | None = None  # all closed segments of a source together


@dataclass
class VirtualCameraOutput:
    """The composite (matte over its background, else the annotated picture) as a webcam for video calls."""

    enabled: Switch = False  # needs pyvirtualcam (the virtualcam extra) and a virtual camera device
    device: str = "auto"  # auto: the first virtual camera (/dev/videoN of v4l2loopback, OBS Virtual Camera)
    fps: Above0 | Literal["auto"] = "auto"  # auto: the source's rate
    backend: str = "auto"  # a pyvirtualcam backend: v4l2loopback, obs, unitycapture (auto: the first that works)


@dataclass
class SinkConfig:
    """One of your own outputs (`outputs.sinks`): a class with open(folder, append) -> state, write(state, result)
    and close(state) (see the site's page "Your own stages"). It writes into the output folder like the built-in
    files: into each segment folder with outputs.segment_s, continued by --resume (append), fenced on a fleet."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]  # the output's name (errors, `list sinks`)
    use: str  # module:Class (importable) or path/to/file.py:Class
    options: dict[str, Any] = field(default_factory=dict)  # given to the class: Class(**options), or Class(options)
    # checked against its `Options` dataclass / model when it has one


@dataclass
class OutputsConfig:
    dir: str = "out"  # the output folder (--output); several sources: a folder each inside it
    segment_s: Annotated[float, Field(ge=1)] | None = None  # roll the files into time-stamped folders of this many
    # seconds (long live runs)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    video: VideoOutput = field(default_factory=VideoOutput)
    jsonl: JsonlOutput = field(default_factory=JsonlOutput)
    tracks: TracksOutput = field(default_factory=TracksOutput)
    matting: MattingVideos = field(default_factory=MattingVideos)
    geometry: GeometryOutput = field(default_factory=GeometryOutput)
    display: Switch = False  # a window with the newest result (q or closing it ends the run)
    virtual_camera: VirtualCameraOutput = field(default_factory=VirtualCameraOutput)
    stream: StreamOutput = field(default_factory=StreamOutput)
    mqtt: MqttOutput = field(default_factory=MqttOutput)
    webhooks: WebhooksOutput = field(default_factory=WebhooksOutput)
    pose2sim: Pose2SimOutput = field(default_factory=Pose2SimOutput)
    sinks: list[SinkConfig] = field(default_factory=list)  # your own outputs, written into the output folder
    # (each segment's) like the built-in files


@dataclass
class ThreeDConfig:
    """People in metres from one camera, when pose and pointmap both run: `keypoints_3d` in the JSONL records, the
    floor and world frame in world.json, and per-track motion-capture files in tracks_3d/."""

    enabled: Switch | Literal["auto"] = "auto"  # auto: whenever models.pose and models.pointmap both run
    calibration: str | None = None  # a Pose2Sim Calib.toml with a camera named like the source (its name in
    # sources:, else the pipeline's name): its intrinsics (keypoints undistorted) and its world frame; without one,
    # the intrinsics come from the pointmap and the world frame from the floor under people's feet
    formats: list[Literal["trc", "c3d", "bvh"]] = field(default_factory=lambda: ["trc", "c3d", "bvh"])  # per track
    cameras: list[str] | None = None  # several cameras: the sources triangulated together into OUTPUT/3d/ (default:
    # every source the calibration names; two or more make a live motion-capture group)
    max_skew_s: Above0 | Literal["auto"] = "auto"  # the longest a moment waits for a camera; auto: half a frame
    sync: Literal["auto", "audio", "none"] = "auto"  # a group's file cameras (live ones go by capture time): their
    # time offsets from their soundtracks (a clap); auto: when every one has a clear one, else none (they started
    # together)
    offsets_s: dict[str, float] = field(default_factory=dict)  # offsets by hand, per camera, over `sync`: camera
    # time t is the group's time t + offset (the export pose2sim convention)
    vmc: list[str] = field(default_factory=list)  # host:port of VMC receivers (VSeeFace, Unity EVMC4U, Blender;
    # usually 127.0.0.1:39539): the first person, live (needs the osc extra)
    osc: list[str] = field(default_factory=list)  # host:port of plain OSC receivers (TouchDesigner, Max): everyone


@dataclass
class FleetConfig:
    """`run --ray`: the cameras of `sources:` spread over Ray workers (the site's page "Batch jobs and the fleet")."""

    workers: Count | Literal["auto"] = "auto"  # auto: one per GPU of the cluster; without GPUs one per
    # cpus_per_worker
    cpus_per_worker: Count = 4  # CPU-only clusters: CPUs per worker (as `batch` does)
    headroom: Annotated[float, Field(ge=0, lt=1)] = 0.2  # spare share of each worker kept free, so a lost worker's
    # cameras fit elsewhere
    pins: dict[str, str] = field(default_factory=dict)  # camera -> Ray node id (hex): tried first, not required
    detect_s: Above0 = 5.0  # how fast a lost node is noticed (Ray's health checks for --ray local; call timeouts)
    camera_fps: Above0 = DEFAULT_FPS  # a camera's frames/s when neither source.fps nor its stream says
    max_result_age_s: Above0 = 10.0  # /healthz: a camera without a result for longer than this is unhealthy


@dataclass
class PipelineConfig:
    source: SourceConfig = field(default_factory=SourceConfig)
    sources: list[SourceConfig] | None = None  # several inputs in one process, instead of `source`
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)
    temporal: TemporalConfig = field(default_factory=TemporalConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    threed: ThreeDConfig = field(default_factory=ThreeDConfig)
    events: EventsConfig = field(default_factory=lambda: EventsConfig())  # zones, lines and poses: events.jsonl,
    # MQTT TOPIC/events; see the site's page "Events"
    stages: list[StageConfig] = field(default_factory=list)  # your own stages, run for every source in frame order
    # (see the site's page "Your own stages")
    fleet: FleetConfig = field(default_factory=FleetConfig)
    name: str = "pipeline"  # names a single source in the summary, Prometheus and MQTT

    def enabled_models(self) -> dict[str, ModelSection]:
        return {k: v for k, v in vars(self.models).items() if v is not None}

    def lifts_3d(self) -> bool:
        """Whether the threed stage runs: on request, or by default when pose and pointmap both run."""
        both = self.models.pose is not None and self.models.pointmap is not None
        return both if self.threed.enabled == "auto" else bool(self.threed.enabled) and both

    def per_source(self) -> list[PipelineConfig]:
        """One single-source configuration per input. Named sources (`sources:`) write to OUTPUT/<name>/; the
        single `source:` writes to OUTPUT/ itself."""
        if self.sources is None:
            return [self if self.source.events is None else dataclasses.replace(self, events=self.source.events)]
        return [self.for_source(src) for src in self.sources]

    def named(self, default: str = "cam1") -> PipelineConfig:
        """This configuration with its input(s) as `sources:` (the single `source:` named `default` unless it has a
        name), for what addresses sources by name (the console, the fleet): outputs then go to OUTPUT/<name>/."""
        if self.sources is not None:
            return self
        return dataclasses.replace(self, sources=[dataclasses.replace(self.source, name=self.source.name or default)])

    def for_source(self, src: SourceConfig) -> PipelineConfig:
        """The single-source configuration of the named source `src`: its outputs in OUTPUT/<name>/."""
        outputs = dataclasses.replace(self.outputs, dir=str(Path(self.outputs.dir) / src.name))
        events = self.events if src.events is None else src.events
        return dataclasses.replace(self, source=src, sources=None, outputs=outputs, events=events)


@dataclass
class ApiOptions:
    """The Python API's keyword options (`sapiens2_stream.stream(source, **options)`, `Sapiens2(...)`): the settings
    people change most, each a shortcut to YAML keys."""

    tasks: list[str] | None = None  # the tasks to run (default: the pipeline's models, else pose)
    size: str = "0.4b"  # the released size of their models (hub ids)
    pipeline: str | None = None  # a pipeline YAML to start from
    models: dict[str, str | dict[str, Any]] = field(default_factory=dict)  # task -> hub id, folder or file
    # (models.<task>.source), or the whole models.<task> section (source, runtime, flip, ...)
    device: str | None = None  # runtime.device
    detector: str | dict[str, Any] | None = None  # detector.type, or the whole detector section
    flip: Mode | None = None  # models.<task>.flip for every task
    smoothing: Literal["none", "kalman", "adaptive", "rts", "one_euro"] | None = None  # smoothing.method
    temporal: Switch | dict[str, Any] | None = None  # true: every output of the tasks that run steadied; false: none;
    # or the whole temporal section
    threed: Switch | Literal["auto"] | dict[str, Any] | None = None  # threed.enabled, or the whole threed section
    set: dict[str, Any] = field(default_factory=dict)  # any other YAML key: {"dotted.key": value}


# ---------------------------------------------------------------------------------------------- validation

BOUNDS = {"greater_than_equal": "at least {ge}", "greater_than": "above {gt}", "less_than_equal": "at most {le}",
          "less_than": "below {lt}", "too_short": "{min_length} long at least", "too_long": "{max_length} long at most",
          "string_pattern_mismatch": "a name of letters, digits, - and _"}  # fmt: skip


def _type_name(tp: Any) -> str:
    """What a type reads as in an error line and in the docs."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _type_name(typing.get_args(tp)[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}.get(
        tp, str(tp)
    )


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(cls)


def from_dict(cls: type, data: dict, path: str = "") -> Any:
    """Build the section `cls` from a mapping (validated strictly, as the JSON Schema reads it), naming the exact
    key and the fix for the first thing wrong; `path` prefixes the keys in messages."""
    try:
        return _adapter(cls).validate_json(json.dumps(data, default=str), strict=True)
    except pydantic.ValidationError as e:
        raise Sapiens2StreamError(explain(cls, e.errors(), path)) from None


def _fields(cls: type) -> dict[str, tuple[str, Any]]:
    """A section's keys as the YAML spells them (aliases) -> (field name, type without bounds); also of a user's
    pydantic model."""
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        return {yaml_key(f): (f.name, hints[f.name]) for f in dataclasses.fields(cls)}
    return {(info.alias or name): (name, hints[name]) for name, info in getattr(cls, "model_fields", {}).items()}


def _walk(cls: type, loc: tuple) -> tuple[list, Any, type | None]:
    """Follow an error's location through the schema: the part of it that names keys and list items, the type
    there and the section holding it (the rest of a location names the members of a union)."""
    known, tp, parent = [], cls, None
    for part in loc:
        bare = typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp
        options = [a for a in typing.get_args(bare) if a is not type(None)]
        if typing.get_origin(bare) in (typing.Union, types.UnionType) and len(options) == 1:
            bare = options[0]  # X | None
        origin = typing.get_origin(bare)
        if isinstance(bare, type) and (dataclasses.is_dataclass(bare) or hasattr(bare, "model_fields")):
            keys = _fields(bare)
            if part not in keys:
                return known, tp, bare
            known.append(part)
            tp, parent = keys[part][1], bare
        elif origin is list and isinstance(part, int):
            known.append(part)
            tp = typing.get_args(bare)[0]
        elif origin is dict:
            known.append(part)
            tp = typing.get_args(bare)[1]
        else:
            break
    return known, tp, parent


def _dotted(prefix: str, parts: list) -> str:
    out = prefix
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(cls: type, errors: list[dict], prefix: str = "") -> str:
    """pydantic's errors as the one line a user reads: the first wrong key, what it must be, what it was."""
    first = errors[0]
    known, tp, parent = _walk(cls, first["loc"])
    key = _dotted(prefix, known)
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden") and parent is not None:
        name = str(first["loc"][len(known)])
        keys = list(_fields(parent))
        close = difflib.get_close_matches(name, keys, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(keys)})"
        return f"unknown key '{_dotted(prefix, [*known, name])}'{hint}"
    if first["type"] == "value_error":  # a section's own check (__post_init__): its message goes on from the key
        said = str(first.get("ctx", {}).get("error", first["msg"]))
        return f"{key}{said}"
    if first["type"] in ("missing", "missing_argument"):
        return f"{_dotted(prefix, [*known, first['loc'][-1]]) if parent is None else key} is missing"
    if not known:
        return f"{prefix or 'the configuration'} must be a mapping of sections, got {first.get('input')!r}"
    here = [e for e in errors if _walk(cls, e["loc"])[0] == known]
    bound = next((e for e in here if e["type"] in BOUNDS), None)
    if bound is not None:
        alternatives = [a for a in typing.get_args(tp) if typing.get_origin(a) is Literal]
        also = "".join(f" (or {', '.join(map(str, typing.get_args(a)))})" for a in alternatives)
        ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in bound.get("ctx", {}).items()}
        return f"{key} must be {BOUNDS[bound['type']].format(**ctx)}{also}, got {bound['input']!r}"
    return f"{key} must be {_type_name(tp)}, got {first.get('input')!r}"


def parse_yaml(text: str, origin: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise Sapiens2StreamError(f"{origin}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Sapiens2StreamError(f"{origin}: the top level must be a mapping of sections (source:, models:, ...)")
    return data


def set_dotted(data: dict, assignment: str) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a nested mapping."""
    if "=" not in assignment:
        raise Sapiens2StreamError(f"--set {assignment!r}: expected KEY=VALUE, e.g. runtime.device=cpu")
    key, raw = assignment.split("=", 1)
    set_value(data, key.strip(), parse_yaml(f"v: {raw}", f"--set {key}")["v"] if raw.strip() else None, "--set ")


def set_value(data: dict, key: str, value: Any, origin: str = "") -> None:
    """`a.b.c` = value in a nested mapping (the sections made as needed)."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise Sapiens2StreamError(f"{origin}{key}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


SOURCE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def source_names(uris: list[str]) -> list[tuple[str, str]]:
    """(name, uri) for each `--source`: NAME=URI names it, otherwise the file stem or camN (N from 1)."""
    named = []
    for i, item in enumerate(uris, 1):
        name, sep, uri = item.partition("=")
        if sep and SOURCE_NAME.match(name) and uri:
            named.append((name, uri))
            continue
        stem = Path(item).stem if "://" not in item and ":" not in item.split("/")[0] else ""
        named.append((re.sub(r"[^A-Za-z0-9_-]", "_", stem) or f"cam{i}", item))
    seen: dict[str, int] = {}
    unique = []
    for name, uri in named:
        seen[name] = seen.get(name, 0) + 1
        unique.append((name if seen[name] == 1 else f"{name}-{seen[name]}", uri))
    return unique


def apply_sources(data: dict, uris: list[str], origin: str) -> None:
    """`--source` replaces the YAML's input(s): one plain URI is the single `source:`; several, or a named one,
    become `sources:`. Keys of the YAML's `source:` section (timeouts, transport, ...) carry over to each."""
    base = data.pop("source", None) or {}
    data.pop("sources", None)
    if not isinstance(base, dict):
        raise Sapiens2StreamError(f"{origin}: source must be a mapping")
    named = source_names(uris)
    if len(uris) == 1 and named[0][1] == uris[0]:  # one source, not named
        data["source"] = {**base, "uri": uris[0]}
    else:
        data["sources"] = [{**base, "uri": uri, "name": name} for name, uri in named]


def load_config(
    path: str | Path | None,
    overrides: list[str] = (),
    source: str | list[str] | None = None,
    output: str | None = None,
) -> PipelineConfig:
    """Read and validate a pipeline YAML, then apply --set overrides and --source (one or several) / --output."""
    data: dict = {}
    origin = "configuration"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise Sapiens2StreamError(f"{path}: no such pipeline file (see the ready ones in pipelines/)")
        data = parse_yaml(p.read_text(), str(path))
        origin = str(path)
    return config_from(data, overrides, source, output, origin)


ENV_REFERENCE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")  # ${NAME}; $${NAME} is a literal ${NAME}


def expand_env(node: Any, origin: str, key: str = "") -> Any:
    """`node` with every `${NAME}` in its strings replaced by that environment variable, so that a camera's
    password stays out of the file (`uri: rtsp://admin:${CAM_PASSWORD}@10.0.0.5/stream1`); an unset one is a
    configuration error naming the key and the variable. `$${NAME}` stays `${NAME}`."""
    if isinstance(node, dict):
        return {k: expand_env(v, origin, f"{key}.{k}" if key else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, origin, f"{key}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def value(match: re.Match) -> str:
        escaped, name = match.groups()
        if escaped:
            return "${" + name + "}"
        if name not in os.environ:
            raise Sapiens2StreamError(f"{origin}: {key} names ${{{name}}}, but that environment variable is not set")
        return os.environ[name]

    return ENV_REFERENCE.sub(value, node)


def config_from(
    data: dict, overrides=(), source: str | list[str] | None = None, output: str | None = None,
    origin: str = "configuration",
) -> PipelineConfig:  # fmt: skip
    """A validated configuration from YAML-shaped data: `overrides` ("key.path=value"), the source(s), the output;
    `${NAME}` in any string taken from the environment."""
    if "source" in data and "sources" in data:
        raise Sapiens2StreamError(
            f"{origin}: both source: and sources: are given; use source: for one input or sources: for several"
        )
    for assignment in overrides:
        set_dotted(data, assignment)
    data = expand_env(data, origin)
    if source:
        apply_sources(data, [source] if isinstance(source, str) else list(source), origin)
    if output is not None:
        node = data.setdefault("outputs", {})
        if not isinstance(node, dict):
            raise Sapiens2StreamError(f"{origin}: outputs must be a mapping")
        node["dir"] = output
    try:
        config = from_dict(PipelineConfig, data)
    except Sapiens2StreamError as e:
        raise Sapiens2StreamError(f"{origin}: {e}") from None
    check_config(config, origin)
    return config


def check_config(config: PipelineConfig, origin: str) -> None:
    """Checks across fields that the types alone cannot express."""

    def fail(message: str) -> None:
        raise Sapiens2StreamError(f"{origin}: {message}")

    if config.sources is None and not config.source.uri:
        fail("source.uri is missing: give a video file, rtsp://..., webcam:0 or a folder (or pass --source)")
    if config.sources is not None:
        if not config.sources:
            fail("sources is empty: list at least one {name, uri} (or use source: for a single input)")
        names = set()
        for i, src in enumerate(config.sources):
            if not src.uri:
                fail(f"sources[{i}].uri is missing: a video file, rtsp://..., webcam:0 or a folder")
            if not SOURCE_NAME.match(src.name):
                fail(f"sources[{i}].name {src.name!r} must be letters, digits, - and _ (it names OUTPUT/<name>/)")
            if src.name in names:
                fail(f"sources[{i}].name {src.name!r} is used twice; every source needs its own name")
            names.add(src.name)
    if not config.enabled_models():
        fail(f"models: enable at least one of {', '.join(t.name for t in pipeline_tasks())} (each with a source:)")
    for name, model in config.enabled_models().items():
        if not model.source:
            fail(f"models.{name}.source is missing: a hub id, a folder or a .safetensors file")
        if model.input_size and any(v % 16 for v in model.input_size):
            fail(f"models.{name}.input_size must be [height, width], multiples of 16 (released models: [1024, 768])")
    if config.detector.type == "file" and not config.detector.path:
        fail("detector.path is missing: a type file detector reads its boxes from a .truth.json or a MOT det.txt")
    if config.detector.type == "fixed":
        if not config.detector.boxes:
            fail("detector.boxes is empty: a fixed detector needs at least one [x, y, w, h] box")
    url = config.outputs.stream.url
    if url and not url.startswith(("rtmp://", "rtmps://", "rtsp://", "rtsps://")):
        fail(f"outputs.stream.url {url!r} must be rtmp://... or rtsp://... (a media server that takes a stream)")
    mqtt = config.outputs.mqtt
    if mqtt.host and mqtt.password_env and mqtt.username is None:
        fail("outputs.mqtt.password_env is set but outputs.mqtt.username is not")
    tls = config.runtime.console.tls
    if tls is not None and not (tls.certfile and tls.keyfile):
        fail("runtime.console.tls needs both certfile and keyfile (PEM files)")
    if config.outputs.pose2sim.enabled:
        if config.sources is None or len(config.sources) < 2 or config.models.pose is None:
            fail("outputs.pose2sim needs the pose model and two or more sources (the cameras of one take)")
        if not config.outputs.jsonl.enabled:
            fail("outputs.pose2sim needs outputs.jsonl.enabled: the project is made from each source's JSONL")
    bg = config.outputs.matting.background
    ok_bg = bg == "blur" or (isinstance(bg, (list, tuple)) and len(bg) == 3) or isinstance(bg, str)
    if not ok_bg:
        fail('outputs.matting.background must be [r, g, b], an image path or "blur"')
    if "matting" in config.outputs.video.draw and config.models.matting is None:
        fail("outputs.video.draw lists matting but models.matting is not enabled")
    if "seg" in config.outputs.video.draw and config.models.seg is None:
        fail("outputs.video.draw lists seg but models.seg is not enabled")
    check_temporal(config.temporal, config.models, fail)


def temporal_outputs() -> dict[str, str]:
    """The temporal filter's switches and the task whose output each steadies (the table's `temporal` keys)."""
    return {spec.temporal.key: spec.name for spec in pipeline_tasks() if spec.temporal}


def check_temporal(t: TemporalConfig, models: ModelsConfig, fail: typing.Callable[[str], None]) -> None:
    for output, model in temporal_outputs().items():
        if getattr(t, output) == "on" and getattr(models, model) is None:
            fail(f"temporal.{output} is on but models.{model} is not enabled (use auto or off)")
