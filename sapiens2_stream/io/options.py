"""The sections of the inputs and outputs: `source:` / `sources:` (the kinds: `registry.SOURCES`), and
`outputs:` with a section per kind of output (`registry.SINKS`). Light on purpose: reading a pipeline file imports
no PyAV or torch, which the sources and sinks themselves need."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field

from ..config import Above0, AtLeast0, Count, Switch, declare, section
from ..events.options import EventsConfig
from ..registry import SOURCES, registered
from ..user_stages import SinkConfig


@section
class ReconnectConfig:
    initial_s: Above0 = 0.5  # first wait after a drop
    max_s: Above0 = 10.0  # waits double up to this
    give_up_s: Above0 | None = None  # stop after this long without frames (None: never)


@section
class SourceConfig:
    uri: str = ""  # video file, rtsp://..., webcam:0, lavfi:testsrc2=..., a folder or glob of images
    name: str = ""  # several sources: names the output folder OUTPUT/<name>/ (letters, digits, - and _)
    kind: Annotated[str, registered(SOURCES, "auto")] = "auto"  # auto: from the uri; else a kind of input
    # (`sapiens2-stream list sources`; frames: python:<n>, the Python API's own frames)
    width: Count | None = None  # webcam capture size
    height: Count | None = None  # webcam capture size
    fps: Above0 | None = None  # webcam capture rate; the timestamp rate of image folders (default 30)
    timeout_s: Above0 = 5.0  # open and read timeout for streams
    transport: Literal["tcp", "udp"] = "tcp"  # rtsp:// streams: TCP (reliable) or UDP (lower latency, may lose)
    decoder: Literal["cpu", "auto", "nvdec"] = "cpu"  # files and streams: decode on the CPU, or on the GPU's video
    # decoder (NVDEC) where the machine has one and the stream suits it, else the CPU (said in the summary)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    max_frames: Count | None = None  # stop after this many frames
    start_frame: Annotated[int, Field(ge=0)] = 0  # files: skip frames before this index (--resume); live: the first
    # frame's index (a camera continued on another fleet worker keeps its numbering)
    events: EventsConfig | None = None  # this camera's own zones, lines and poses (replacing the pipeline's
    # `events:` for it; each camera has its own picture)


@section
class RetentionConfig:
    """What happens to closed segments (outputs.segment_s): the oldest are deleted while either limit is passed."""

    max_age_h: Above0 | None = None  # closed segments older than this many hours
    max_gb: Above0 | None = None  # all closed segments of a source together


@section(key="outputs")
class OutputsBase:
    """Where the outputs go (`outputs:`): the folder, its segments and your own outputs; each kind of output
    (SINKS) adds its own section."""

    dir: str = "out"  # the output folder (--output); several sources: a folder each inside it
    segment_s: Annotated[float, Field(ge=1)] | None = None  # roll the files into time-stamped folders of this many
    # seconds (long live runs)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    sinks: list[SinkConfig] = field(default_factory=list)  # your own outputs, written into the output folder
    # (each segment's) like the built-in files


@section(key="outputs.jsonl")
class JsonlOutput:
    enabled: Switch = True  # one JSON line per frame: people, boxes, keypoints, flags
    name: str = "results.jsonl"  # its file name in the output folder


@section(key="outputs.event_log")
class EventLogOutput:
    enabled: Switch = True  # events.jsonl and a snapshot of each event's frame (snapshots/) in the output folder,
    # when a stage makes events (zones, lines, poses, gait); the events still reach MQTT, webhooks and the API


Layer = Literal["pose", "seg", "boxes", "matting", "keypoints"]  # what an annotated picture can show


@section(key="outputs.video")
class VideoOutput:
    enabled: Switch = True  # the annotated video
    name: str = "annotated.mp4"  # its file name in the output folder
    draw: list[Layer] = field(default_factory=lambda: ["pose", "boxes"])  # layers (keypoints: all 308 as dots too)
    keypoint_threshold: AtLeast0 = 0.3  # keypoints scoring below this are not drawn
    view_3d: Switch = False  # with threed: the people's 3-D skeletons from above and from the side, bottom right
    crf: Annotated[int, Field(ge=0, le=51)] = 23  # x264 quality (lower: better, larger)
    preset: str = "veryfast"  # x264 speed preset
    encoder: Literal["cpu", "auto", "nvenc"] = "cpu"  # x264 on the CPU, or the GPU's video encoder (NVENC) where
    # the machine has one, else x264 (said in the summary)
    copy_audio: Switch = True  # the source's soundtrack copied into the video at the end


@section(key="outputs.matting")
class MattingVideos:
    """What the matting model gives, when it runs: the composite and the matte as videos."""

    composite: Switch = True  # the people over the background, as a video
    background: Any = (0, 177, 64)  # [r, g, b], an image path, or "blur"
    composite_name: str = "composite.mp4"  # (file names in the output folder)
    alpha: Switch = False  # the matte itself, as a grey video
    alpha_name: str = "alpha.mp4"  # (file names in the output folder)


@section(key="outputs.geometry")
class GeometryOutput:
    """What normal and pointmap models give, when they run: videos to watch, and the maps themselves on request."""

    normals_video: Switch = True  # normals as colours, (n + 1) / 2
    normals_name: str = "normals.mp4"  # (file names in the output folder)
    depth_video: Switch = True  # the pointmap's depth (z) as a colour map, near warm, far cool
    depth_name: str = "depth.mp4"  # (file names in the output folder)
    maps: Switch = False  # maps/frame_NNNNNN.npz: float16 normals and pointmap [H, W, 3] per frame, for 3-D tools


@section(key="outputs.tracks")
class TracksOutput:
    enabled: Switch = False  # per-track files in tracks/, smoothed over the whole track
    formats: list[Literal["npz", "parquet", "trc"]] = field(default_factory=lambda: ["npz"])  # any of them


declare("outputs.display", Switch, False, "a window with the newest result (q or closing it ends the run)")


@section(key="outputs.virtual_camera")
class VirtualCameraOutput:
    """The composite (matte over its background, else the annotated picture) as a webcam for video calls."""

    enabled: Switch = False  # needs pyvirtualcam (the virtualcam extra) and a virtual camera device
    device: str = "auto"  # auto: the first virtual camera (/dev/videoN of v4l2loopback, OBS Virtual Camera)
    fps: Above0 | Literal["auto"] = "auto"  # auto: the source's rate
    backend: str = "auto"  # a pyvirtualcam backend: v4l2loopback, obs, unitycapture (auto: the first that works)


@section(key="outputs.stream")
class StreamOutput:
    """Re-stream the annotated video to a media server (RTMP: FLV; RTSP: RECORD)."""

    url: str = ""  # rtmp://host/app/{source} or rtsp://host/path/{source}; empty: no re-stream
    transport: Literal["tcp", "udp"] = "tcp"  # rtsp:// only
    bitrate_kbps: Count = 2500  # the re-stream's video bitrate
    queue: Count = 30  # frames waiting for the server; more are dropped (counted), never waited for
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)


@section
class MqttTls:
    """MQTT over TLS (`outputs.mqtt.tls`, usually port 8883): the broker's certificate verified unless insecure."""

    ca_certs: str | None = None  # the CA that signed the broker's certificate (PEM); None: the system's CAs
    certfile: str | None = None  # our client certificate (PEM), for brokers that ask for one
    keyfile: str | None = None  # its private key
    insecure: Switch = False  # true: do not verify the broker's certificate or name (tests only: anyone can listen)


@section(key="outputs.mqtt")
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


@section(key="outputs.webhooks")
class WebhooksOutput:
    """Every event (the `events:` section) as an HTTP POST of its JSON, from a queue that never slows the run."""

    urls: list[str] = field(default_factory=list)  # where to POST; empty: no webhooks
    queue: Count = 1000  # events waiting per URL while a receiver is down; more drop the oldest (counted)
    timeout_s: Above0 = 5.0  # one POST's time limit
    max_backoff_s: Above0 = 10.0  # the longest wait between two tries of a failing URL
    drain_s: AtLeast0 = 5.0  # at the end of a run, how long to keep delivering what is still queued
    secret_env: str | None = None  # the environment variable holding the key that signs each POST (HMAC-SHA256)
    ca_certs: str | None = None  # a private CA's certificate (PEM) for https:// receivers; default: the system's
