"""Frame sources through PyAV: video files, RTSP/RTMP/HTTP streams, webcams, lavfi test sources, image folders.

Every frame keeps its index, its presentation time in seconds and the wall time it arrived. Live sources
(streams, webcams, lavfi) connect on their own and reconnect with exponential backoff: a camera that is down when
the run starts is tried again while the others run, a dropped camera is a gap, counted, not a crash. Their
timestamps stay monotonic across reconnects (wall-clock offset per connection). A live source's `connection`
says where it stands (connecting, live, reconnecting, gave_up; why the latest attempt failed; when the next is).
"""

from __future__ import annotations

import glob
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from ..config import (
    DEFAULT_FPS,
)
from ..errors import Sapiens2StreamError, redact
from .backoff import Backoff
from .options import SourceConfig
from .pixels import rgb_of
from .pyav import av
from .source_kinds import source_kind
from .upright import UPRIGHT, Orientation, display_orientation, exif_orientation, pixel_aspect, square_pixels

log = logging.getLogger("sapiens2_stream")
JUMP_S = 2.0  # a live timestamp step outside (0, JUMP_S) seconds is a clock jump, not time passing
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


@dataclass
class Frame:
    index: int
    pts_s: float
    wall_s: float
    rgb: np.ndarray  # HxWx3 uint8 RGB


@dataclass
class SourceStats:
    frames: int = 0
    reconnects: int = 0
    gaps_s: float = 0.0  # total time without frames between a drop and the next frame
    corrupt: int = 0  # packets or images that could not be decoded and were skipped
    events: list[str] = field(default_factory=list)
    conversions: list[str] = field(default_factory=list)  # how frames were made upright and square, said once each
    last_frame_wall: float | None = None  # when the latest frame arrived (health checks)


@dataclass
class Connection:
    """A live source's link to its camera, as the status line, console, summary.json, /metrics and /healthz show it."""

    state: str = "connecting"  # connecting (no frame yet), live, reconnecting (dropped), gave_up (give_up_s passed)
    reason: str | None = None  # why the latest attempt failed (its password redacted)
    next_attempt_wall: float | None = None  # when the next attempt is made (unix seconds)

    def snapshot(self) -> dict:
        next_in = None if self.next_attempt_wall is None else max(0.0, self.next_attempt_wall - time.time())
        return {"state": self.state, "reason": self.reason,
                "next_attempt_in_s": None if next_in is None else round(next_in, 1)}  # fmt: skip

    @property
    def up(self) -> bool:
        return self.state == "live"


@dataclass
class Feed:
    """Frames from the caller's own code (the Python API): an iterable of HxWx3 uint8 arrays, or of (array,
    seconds) pairs; `bgr`: the arrays are OpenCV's BGR; `fps`: the timestamps of bare arrays."""

    frames: Iterable
    bgr: bool = False
    fps: float = DEFAULT_FPS


FEEDS: dict[str, Feed] = {}  # python:<n> sources, by URI


def register_feed(feed: Feed) -> str:
    """The URI of a `Feed` as a source (`python:<n>`); `forget_feed` when its run is over."""
    uri = f"python:{id(feed)}"
    FEEDS[uri] = feed
    return uri


def forget_feed(uri: str) -> None:
    FEEDS.pop(uri, None)


def video_devices() -> list[str]:
    """The webcams Linux shows (/dev/video*), for error messages."""
    return sorted(glob.glob("/dev/video*"), key=lambda p: (len(p), p))


def image_paths(uri: str) -> list[Path]:
    p = Path(uri)
    if p.is_dir():
        paths = [q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES]
    else:
        paths = [Path(q) for q in glob.glob(uri)]
    if not paths:
        raise Sapiens2StreamError(f"{uri}: no images found (expected {', '.join(IMAGE_SUFFIXES)})")
    return sorted(paths)


def read_image(path: Path, turn: Orientation = UPRIGHT) -> np.ndarray | None:
    """An image file as HxWx3 uint8 RGB (grayscale, alpha and 16-bit converted), upright by `turn` (its EXIF
    orientation), or None if unreadable."""
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)  # (this flag leaves the EXIF orientation to us)
    if img is None:
        return None
    if img.dtype == np.uint16:
        img = (img / 257).round().astype(np.uint8)
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    elif img.shape[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    else:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return turn.apply(img)


class Source:
    """Iterate frames from one configured input. `live` sources may drop frames; files never do."""

    def __init__(self, cfg: SourceConfig) -> None:
        self.cfg = cfg
        self.spec = source_kind(cfg)
        self.kind, self.live = self.spec.name, self.spec.live
        self.stats = SourceStats()
        self.total_frames: int | None = None
        self.fps: float | None = None
        self.audio_path: str | None = None  # a file whose audio the video sink can copy
        self.rate: float | None = None  # a live stream's nominal frames/s, as it said when connected (planning)
        self.listeners: list = []  # (event, fields) callbacks: source_disconnected, source_reconnected
        self.connection = Connection() if self.live else None
        self.on_gpu = False  # the latest connection asked FFmpeg for the GPU's decoder (`decoder`)
        self._paths: list[Path] = []
        if self.spec.probe is not None:
            getattr(self, self.spec.probe)()
        if self.total_frames is not None and cfg.max_frames is not None:
            self.total_frames = min(self.total_frames, cfg.max_frames)

    def connect(self) -> None:
        """A live source tries its camera once before the run, for its nominal frame rate (planning); a camera that
        is down is said (one line) and left to the reader, which keeps trying while the other sources run. Other
        kinds have nothing to do."""
        if not self.live:
            return
        try:
            container = self._open()
        except Sapiens2StreamError as e:
            self._failed(str(e), self.cfg.reconnect.initial_s)
            return
        with container:
            self._learn_rate(container)

    def _learn_rate(self, container: av.container.InputContainer) -> None:
        video = container.streams.video
        rate = video[0].average_rate if video else None
        self.rate = float(rate) if rate else self.rate

    def _failed(self, reason: str, wait_s: float) -> None:
        """An attempt to connect failed: said once per reason while the camera has never delivered a frame."""
        c = self.connection
        reason = redact(reason)
        if c.state == "connecting" and reason != c.reason:
            log.warning(f"source {self.label}: {reason}; trying again while the other sources run")
        c.reason, c.next_attempt_wall = reason, time.time() + wait_s

    @property
    def label(self) -> str:
        """The source's name, else its URI (password redacted), for lines about it."""
        return self.cfg.name or self.source_id

    @property
    def source_id(self) -> str:
        """The URI as outputs name it (its password redacted)."""
        return redact(self.cfg.uri)

    # ------------------------------------------------------------------------------------------- opening

    def _open(self) -> av.container.InputContainer:
        cfg = self.cfg
        target, fmt, options = self.spec.opening(cfg)
        timeout = (cfg.timeout_s, cfg.timeout_s) if self.live else None
        self.on_gpu = False
        if cfg.decoder != "cpu":
            try:
                container = av.open(target, format=fmt, options=options, timeout=timeout,
                                    hwaccel=av.codec.hwaccel.HWAccel("cuda", allow_software_fallback=True))  # fmt: skip
                self.on_gpu = True
                return container
            except FileNotFoundError:
                pass  # said below, as without a decoder asked
            except (av.FFmpegError, OSError) as e:
                self._note(f"decoded on the CPU: decoder {cfg.decoder} asked, the GPU's decoder does not open here "
                           f"({_reason(e)})")  # fmt: skip
        try:
            return av.open(target, format=fmt, options=options, timeout=timeout)
        except FileNotFoundError:
            if self.kind == "webcam":
                raise Sapiens2StreamError(
                    f"{cfg.uri}: no camera at {target} (cameras here: {', '.join(video_devices()) or 'none'}); "
                    "set source.uri to webcam:N"
                ) from None
            raise Sapiens2StreamError(f"{cfg.uri}: no such file") from None
        except (av.FFmpegError, OSError) as e:
            raise Sapiens2StreamError(f"{cfg.uri}: cannot open ({_reason(e)})") from None

    def _list_images(self) -> None:
        self._paths = image_paths(self.cfg.uri)
        self.total_frames = len(self._paths)
        self.fps = self.cfg.fps or DEFAULT_FPS

    def _find_feed(self) -> None:
        if self.cfg.uri not in FEEDS:
            raise Sapiens2StreamError(f"{self.cfg.uri}: no such frame feed (python: sources come from the Python API)")
        feed = FEEDS[self.cfg.uri]
        self.fps = self.cfg.fps or feed.fps
        self.total_frames = len(feed.frames) if isinstance(feed.frames, Sized) else None

    def _probe_file(self) -> None:
        path = Path(self.cfg.uri)
        if not path.exists():
            raise Sapiens2StreamError(f"{self.cfg.uri}: no such file")
        if path.stat().st_size == 0:
            raise Sapiens2StreamError(f"{self.cfg.uri}: the file is empty")
        with self._open() as container:
            if not container.streams.video:
                raise Sapiens2StreamError(f"{self.cfg.uri}: no video stream in this file")
            stream = container.streams.video[0]
            self.fps = float(stream.average_rate) if stream.average_rate else None
            self.total_frames = stream.frames or None
            if not self.total_frames and container.duration and self.fps:
                self.total_frames = int(container.duration / 1e6 * self.fps)
            if container.streams.audio:
                self.audio_path = str(path)

    # ------------------------------------------------------------------------------------------- reading

    def frames(self, stop: threading.Event | None = None) -> Iterator[Frame]:
        """All frames, in order. Live sources reconnect until `stop` is set (or give_up_s passes)."""
        yield from getattr(self, self.spec.read)(stop or threading.Event())

    def _limit_reached(self, index: int) -> bool:
        return self.cfg.max_frames is not None and index >= self.cfg.max_frames

    def _emit(self, index: int, pts_s: float, rgb: np.ndarray) -> Frame:
        self.stats.frames += 1
        self.stats.last_frame_wall = time.time()
        return Frame(index, pts_s, self.stats.last_frame_wall, rgb)

    def _notify(self, event: str, **fields) -> None:
        """Tell the listeners (MQTT events) that the camera dropped or came back; from the reader's thread."""
        fields = {"wall": round(time.time(), 3), **fields}
        for listener in self.listeners:
            listener(event, fields)

    def _note(self, conversion: str) -> None:
        if conversion not in self.stats.conversions:
            self.stats.conversions.append(conversion)

    def _picture(self, vf: av.VideoFrame, sar: Fraction, turn: Orientation) -> np.ndarray:
        """A decoded frame as players show it: square pixels, then upright (`turn`: `display_orientation` of the
        connection's first frame); each conversion noted once."""
        rgb = rgb_of(vf)
        if sar != 1:
            h, w = rgb.shape[:2]
            rgb = square_pixels(rgb, sar)
            self._note(f"resampled to square pixels (sample aspect ratio {sar.numerator}:{sar.denominator}, "
                       f"{w}x{h} stored, {rgb.shape[1]}x{h} shown)")  # fmt: skip
        if turn != UPRIGHT:
            self._note(f"{turn} to show them upright, as the video's display matrix says")
        return turn.apply(rgb)

    def _image_frames(self, stop: threading.Event) -> Iterator[Frame]:
        for i, path in enumerate(self._paths):
            if stop.is_set() or self._limit_reached(i):
                return
            if i < self.cfg.start_frame:
                continue
            turn = exif_orientation(path)
            rgb = read_image(path, turn)
            if rgb is None:
                self.stats.corrupt += 1
                self.stats.events.append(f"skipped unreadable image {path.name}")
                continue
            if turn != UPRIGHT:
                self._note("photos shown upright as their EXIF orientation says")
            yield self._emit(i, i / self.fps, rgb)

    def _feed_frames(self, stop: threading.Event) -> Iterator[Frame]:
        feed = FEEDS[self.cfg.uri]
        for i, item in enumerate(feed.frames):
            if stop.is_set() or self._limit_reached(i):
                return
            picture, pts = item if isinstance(item, tuple) else (item, i / self.fps)
            picture = np.asarray(picture)
            if picture.ndim == 2:
                picture = np.repeat(picture[..., None], 3, axis=2)
            if picture.ndim != 3 or picture.shape[2] not in (3, 4) or picture.dtype != np.uint8:
                raise Sapiens2StreamError(f"frame {i}: expected an HxWx3 uint8 picture, got {picture.dtype} "
                                          f"{picture.shape}")  # fmt: skip
            picture = picture[..., :3]
            rgb = np.ascontiguousarray(picture[..., ::-1] if feed.bgr else picture)
            yield self._emit(i, float(pts), rgb)

    def _decode(self, container: av.container.InputContainer) -> Iterator[av.VideoFrame]:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        told = not self.on_gpu
        for packet in container.demux(stream):
            try:
                for frame in packet.decode():
                    if not told:  # which decoder the frames came from, said once
                        told = True
                        self._note(decoder_used(self.cfg.decoder, stream.codec_context))
                    yield frame
            except av.error.InvalidDataError:
                self.stats.corrupt += 1

    def _file_frames(self, stop: threading.Event) -> Iterator[Frame]:
        with self._open() as container:
            stream = container.streams.video[0]
            sar = pixel_aspect(stream.codec_context.sample_aspect_ratio)
            fps = self.fps or DEFAULT_FPS
            index, turn = 0, None
            try:
                for vf in self._decode(container):
                    if stop.is_set() or self._limit_reached(index):
                        return
                    turn = turn or display_orientation(vf)
                    if index >= self.cfg.start_frame:
                        pts = vf.time if vf.time is not None else index / fps
                        yield self._emit(index, float(pts), self._picture(vf, sar, turn))
                    index += 1
            except av.FFmpegError as e:
                self.stats.events.append(f"decoding stopped at frame {index}: {_reason(e)}")
                if index == 0:
                    raise Sapiens2StreamError(f"{self.cfg.uri}: cannot decode video ({_reason(e)})") from None
            if index == 0 and stream.frames == 0:
                raise Sapiens2StreamError(f"{self.cfg.uri}: the video has no decodable frames")

    def _live_frames(self, stop: threading.Event) -> Iterator[Frame]:
        """Connect, read, and on any drop or end of stream wait (doubling backoff) and connect again.

        Timestamps: the stream's own clock, offset per connection so that they continue in real time across
        reconnects, and re-based whenever the stream's clock jumps, so pts always increases.
        """
        rc = self.cfg.reconnect
        index, start = self.cfg.start_frame, time.time()  # a continued camera keeps numbering
        backoff = Backoff(rc.initial_s, rc.max_s)
        last_frame_wall: float | None = None
        last_pts: float | None = None
        connection = self.connection
        while not stop.is_set() and not self._limit_reached(index):
            offset, failure = None, None
            try:
                container = self._open()
            except Sapiens2StreamError as e:
                failure = str(e)
                if failure not in self.stats.events[-1:]:  # a camera down for hours: said once, not every attempt
                    self.stats.events.append(failure)
            else:
                with container:
                    self._learn_rate(container)
                    sar = pixel_aspect(container.streams.video[0].codec_context.sample_aspect_ratio)
                    turn = None
                    try:
                        for vf in self._decode(container):
                            if stop.is_set() or self._limit_reached(index):
                                return
                            now = time.time()
                            stream_t = float(vf.time) if vf.time is not None else now - start
                            if offset is None:
                                offset = (now - start) - stream_t
                                if connection.state == "connecting" and connection.reason is not None:
                                    log.warning(f"source {self.label}: connected")
                                connection.state, connection.reason, connection.next_attempt_wall = "live", None, None
                                if last_frame_wall is not None:
                                    self.stats.gaps_s += now - last_frame_wall
                                    self._notify("source_reconnected", gap_s=round(now - last_frame_wall, 3))
                            pts = stream_t + offset
                            if last_pts is not None and not 0 < pts - last_pts < JUMP_S:
                                # the stream's clock jumped (RTCP sync, camera restart): continue in wall time
                                offset = last_pts + max(now - last_frame_wall, 1e-3) - stream_t
                                pts = stream_t + offset
                            last_frame_wall, last_pts = now, pts
                            backoff.reset()
                            turn = turn or display_orientation(vf)
                            yield self._emit(index, pts, self._picture(vf, sar, turn))
                            index += 1
                    except av.FFmpegError as e:
                        self.stats.events.append(f"stream error: {_reason(e)}")
                        connection.reason = redact(f"stream error: {_reason(e)}")
            if stop.is_set() or self._limit_reached(index):
                return
            if offset is not None:  # this connection had delivered frames: the camera dropped
                connection.state = "reconnecting"
                self._notify("source_disconnected")
                backoff.reset()
            wait_s = backoff.next()  # the one wait between this attempt and the next
            if failure is not None:
                self._failed(failure, wait_s)
            silent_for = time.time() - (last_frame_wall or start)
            if rc.give_up_s is not None and silent_for > rc.give_up_s:
                never = last_frame_wall is None
                connection.state, connection.next_attempt_wall = "gave_up", None
                self.stats.events.append(f"gave up after {silent_for:.1f}s without frames")
                if never:  # a camera that never came up ends as a failed source (its outputs were never started)
                    raise Sapiens2StreamError(
                        f"{self.cfg.uri}: gave up after {silent_for:.0f} s (source.reconnect."
                        f"give_up_s): the camera never delivered a frame ({connection.reason})"
                    )
                log.warning(f"source {self.label}: gave up after {silent_for:.0f} s without frames "
                            "(source.reconnect.give_up_s)")  # fmt: skip
                return
            self.stats.reconnects += 1
            connection.next_attempt_wall = time.time() + wait_s
            stop.wait(wait_s)


def decoder_used(asked: str, codec) -> str:
    """What a source's `decoder` setting gave once the GPU's decoder was asked for, as its summary says it (once):
    the GPU's, or the CPU's where FFmpeg fell back (the stream's codec not one NVDEC takes)."""
    if codec.is_hwaccel:
        return f"decoded on the GPU (NVDEC, {codec.name})"
    return f"decoded on the CPU: decoder {asked} asked, NVDEC does not take {codec.name}"


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
