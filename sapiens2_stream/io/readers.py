"""How each kind of input is read (`source.kind`, `io.source_kinds`): a reader class per kind, registered for it
(`@reads`). A reader learns what it can before the run (`probe`: rate, length, the files of a folder) and yields the
frames (`frames`); the `io.sources.Source` it reads for holds the state every kind shares (its counters, a live
source's connection, how a frame is opened, decoded, made upright and counted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sized
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..config import DEFAULT_FPS
from ..errors import Sapiens2StreamError, redact
from .backoff import Backoff
from .pixels import rgb_of
from .pyav import av
from .source_kinds import reads
from .source_parts import FEEDS, Frame, image_paths, read_image, video_devices
from .upright import UPRIGHT, Orientation, display_orientation, exif_orientation, pixel_aspect, square_pixels

log = logging.getLogger("sapiens2_stream")
JUMP_S = 2.0  # a live timestamp step outside (0, JUMP_S) seconds is a clock jump, not time passing


class Reader:
    """One kind's way of reading, for one source (`source`: an `io.sources.Source`, whose counters, connection and
    settings it keeps up to date), and what every kind's reading shares: opening with FFmpeg, decoding, a picture
    made square and upright, a frame counted."""

    def __init__(self, source) -> None:
        self.source = source

    def probe(self) -> None:
        """What can be known before the run (the source's `fps`, `total_frames`, `audio_path`); nothing here."""

    def frames(self, stop: threading.Event | None = None) -> Iterator[Frame]:
        """All frames, in order. Live sources reconnect until `stop` is set (or give_up_s passes)."""
        yield from self.read(stop or threading.Event())

    def read(self, stop: threading.Event) -> Iterator[Frame]:
        raise NotImplementedError

    def learn_rate(self, container: av.container.InputContainer) -> None:
        video = container.streams.video
        rate = video[0].average_rate if video else None
        self.source.rate = float(rate) if rate else self.source.rate

    def failed(self, reason: str, wait_s: float) -> None:
        """An attempt to connect failed: said once per reason while the camera has never delivered a frame."""
        c = self.source.connection
        reason = redact(reason)
        if c.state == "connecting" and reason != c.reason:
            log.warning(f"source {self.source.label}: {reason}; trying again while the other sources run")
        c.reason, c.next_attempt_wall = reason, time.time() + wait_s

    def open(self) -> av.container.InputContainer:
        cfg = self.source.cfg
        target, fmt, options = self.source.spec.opening(cfg)
        timeout = (cfg.timeout_s, cfg.timeout_s) if self.source.live else None
        self.source.on_gpu = False
        if cfg.decoder != "cpu":
            try:
                container = av.open(target, format=fmt, options=options, timeout=timeout,
                                    hwaccel=av.codec.hwaccel.HWAccel("cuda", allow_software_fallback=True))  # fmt: skip
                self.source.on_gpu = True
                return container
            except FileNotFoundError:
                pass  # said below, as without a decoder asked
            except (av.FFmpegError, OSError) as e:
                self.note(f"decoded on the CPU: decoder {cfg.decoder} asked, the GPU's decoder does not open here "
                           f"({reason(e)})")  # fmt: skip
        try:
            return av.open(target, format=fmt, options=options, timeout=timeout)
        except FileNotFoundError:
            if self.source.kind == "webcam":
                raise Sapiens2StreamError(
                    f"{cfg.uri}: no camera at {target} (cameras here: {', '.join(video_devices()) or 'none'}); "
                    "set source.uri to webcam:N"
                ) from None
            raise Sapiens2StreamError(f"{cfg.uri}: no such file") from None
        except (av.FFmpegError, OSError) as e:
            raise Sapiens2StreamError(f"{cfg.uri}: cannot open ({reason(e)})") from None

    def limit_reached(self, index: int) -> bool:
        return self.source.cfg.max_frames is not None and index >= self.source.cfg.max_frames

    def emit(self, index: int, pts_s: float, rgb: np.ndarray) -> Frame:
        self.source.stats.frames += 1
        self.source.stats.last_frame_wall = time.time()
        return Frame(index, pts_s, self.source.stats.last_frame_wall, rgb)

    def notify(self, event: str, **fields) -> None:
        """Tell the listeners (MQTT events) that the camera dropped or came back; from the reader's thread."""
        fields = {"wall": round(time.time(), 3), **fields}
        for listener in self.source.listeners:
            listener(event, fields)

    def note(self, conversion: str) -> None:
        if conversion not in self.source.stats.conversions:
            self.source.stats.conversions.append(conversion)

    def picture(self, vf: av.VideoFrame, sar: Fraction, turn: Orientation) -> np.ndarray:
        """A decoded frame as players show it: square pixels, then upright (`turn`: `display_orientation` of the
        connection's first frame); each conversion noted once."""
        rgb = rgb_of(vf)
        if sar != 1:
            h, w = rgb.shape[:2]
            rgb = square_pixels(rgb, sar)
            self.note(f"resampled to square pixels (sample aspect ratio {sar.numerator}:{sar.denominator}, "
                       f"{w}x{h} stored, {rgb.shape[1]}x{h} shown)")  # fmt: skip
        if turn != UPRIGHT:
            self.note(f"{turn} to show them upright, as the video's display matrix says")
        return turn.apply(rgb)

    def decode(self, container: av.container.InputContainer) -> Iterator[av.VideoFrame]:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        told = not self.source.on_gpu
        for packet in container.demux(stream):
            try:
                for frame in packet.decode():
                    if not told:  # which decoder the frames came from, said once
                        told = True
                        self.note(decoder_used(self.source.cfg.decoder, stream.codec_context))
                    yield frame
            except av.error.InvalidDataError:
                self.source.stats.corrupt += 1


@reads("file")
class FileReader(Reader):
    """A video file: probed for its rate, length and sound; read in order, nothing dropped, from `start_frame`."""

    def probe(self) -> None:
        src = self.source
        path = Path(src.cfg.uri)
        if not path.exists():
            raise Sapiens2StreamError(f"{src.cfg.uri}: no such file")
        if path.stat().st_size == 0:
            raise Sapiens2StreamError(f"{src.cfg.uri}: the file is empty")
        with self.open() as container:
            if not container.streams.video:
                raise Sapiens2StreamError(f"{src.cfg.uri}: no video stream in this file")
            stream = container.streams.video[0]
            src.fps = float(stream.average_rate) if stream.average_rate else None
            src.total_frames = stream.frames or None
            if not src.total_frames and container.duration and src.fps:
                src.total_frames = int(container.duration / 1e6 * src.fps)
            if container.streams.audio:
                src.audio_path = str(path)

    def read(self, stop: threading.Event) -> Iterator[Frame]:
        src = self.source
        with self.open() as container:
            stream = container.streams.video[0]
            sar = pixel_aspect(stream.codec_context.sample_aspect_ratio)
            fps = src.fps or DEFAULT_FPS
            index, turn = 0, None
            try:
                for vf in self.decode(container):
                    if stop.is_set() or self.limit_reached(index):
                        return
                    turn = turn or display_orientation(vf)
                    if index >= src.cfg.start_frame:
                        pts = vf.time if vf.time is not None else index / fps
                        yield self.emit(index, float(pts), self.picture(vf, sar, turn))
                    index += 1
            except av.FFmpegError as e:
                src.stats.events.append(f"decoding stopped at frame {index}: {reason(e)}")
                if index == 0:
                    raise Sapiens2StreamError(f"{src.cfg.uri}: cannot decode video ({reason(e)})") from None
            if index == 0 and stream.frames == 0:
                raise Sapiens2StreamError(f"{src.cfg.uri}: the video has no decodable frames")


@reads("stream", "webcam", "lavfi")
class LiveReader(Reader):
    """A camera (a network stream, a webcam, an FFmpeg filter graph): connected, read, and on any drop or end of
    stream waited for (doubling backoff) and connected again, until stopped or `give_up_s` passes.

    Timestamps: the stream's own clock, offset per connection so that they continue in real time across
    reconnects, and re-based whenever the stream's clock jumps, so pts always increases."""

    def read(self, stop: threading.Event) -> Iterator[Frame]:
        src = self.source
        rc = src.cfg.reconnect
        index, start = src.cfg.start_frame, time.time()  # a continued camera keeps numbering
        backoff = Backoff(rc.initial_s, rc.max_s)
        last_frame_wall: float | None = None
        last_pts: float | None = None
        connection = src.connection
        while not stop.is_set() and not self.limit_reached(index):
            offset, failure = None, None
            try:
                container = self.open()
            except Sapiens2StreamError as e:
                failure = str(e)
                if failure not in src.stats.events[-1:]:  # a camera down for hours: said once, not every attempt
                    src.stats.events.append(failure)
            else:
                with container:
                    self.learn_rate(container)
                    sar = pixel_aspect(container.streams.video[0].codec_context.sample_aspect_ratio)
                    turn = None
                    try:
                        for vf in self.decode(container):
                            if stop.is_set() or self.limit_reached(index):
                                return
                            now = time.time()
                            stream_t = float(vf.time) if vf.time is not None else now - start
                            if offset is None:
                                offset = (now - start) - stream_t
                                if connection.state == "connecting" and connection.reason is not None:
                                    log.warning(f"source {src.label}: connected")
                                connection.state, connection.reason, connection.next_attempt_wall = "live", None, None
                                if last_frame_wall is not None:
                                    src.stats.gaps_s += now - last_frame_wall
                                    self.notify("source_reconnected", gap_s=round(now - last_frame_wall, 3))
                            pts = stream_t + offset
                            if last_pts is not None and not 0 < pts - last_pts < JUMP_S:
                                # the stream's clock jumped (RTCP sync, camera restart): continue in wall time
                                offset = last_pts + max(now - last_frame_wall, 1e-3) - stream_t
                                pts = stream_t + offset
                            last_frame_wall, last_pts = now, pts
                            backoff.reset()
                            turn = turn or display_orientation(vf)
                            yield self.emit(index, pts, self.picture(vf, sar, turn))
                            index += 1
                    except av.FFmpegError as e:
                        src.stats.events.append(f"stream error: {reason(e)}")
                        connection.reason = redact(f"stream error: {reason(e)}")
            if stop.is_set() or self.limit_reached(index):
                return
            if offset is not None:  # this connection had delivered frames: the camera dropped
                connection.state = "reconnecting"
                self.notify("source_disconnected")
                backoff.reset()
            wait_s = backoff.next()  # the one wait between this attempt and the next
            if failure is not None:
                self.failed(failure, wait_s)
            silent_for = time.time() - (last_frame_wall or start)
            if rc.give_up_s is not None and silent_for > rc.give_up_s:
                never = last_frame_wall is None
                connection.state, connection.next_attempt_wall = "gave_up", None
                src.stats.events.append(f"gave up after {silent_for:.1f}s without frames")
                if never:  # a camera that never came up ends as a failed source (its outputs were never started)
                    raise Sapiens2StreamError(
                        f"{src.cfg.uri}: gave up after {silent_for:.0f} s (source.reconnect."
                        f"give_up_s): the camera never delivered a frame ({connection.reason})"
                    )
                log.warning(f"source {src.label}: gave up after {silent_for:.0f} s without frames "
                            "(source.reconnect.give_up_s)")  # fmt: skip
                return
            src.stats.reconnects += 1
            connection.next_attempt_wall = time.time() + wait_s
            stop.wait(wait_s)


@reads("images")
class ImagesReader(Reader):
    """A folder or glob of photos, in name order, each upright as its EXIF orientation says; an unreadable one is
    skipped and counted."""

    def probe(self) -> None:
        src = self.source
        self.paths = image_paths(src.cfg.uri)
        src.total_frames = len(self.paths)
        src.fps = src.cfg.fps or DEFAULT_FPS

    def read(self, stop: threading.Event) -> Iterator[Frame]:
        src = self.source
        for i, path in enumerate(self.paths):
            if stop.is_set() or self.limit_reached(i):
                return
            if i < src.cfg.start_frame:
                continue
            turn = exif_orientation(path)
            rgb = read_image(path, turn)
            if rgb is None:
                src.stats.corrupt += 1
                src.stats.events.append(f"skipped unreadable image {path.name}")
                continue
            if turn != UPRIGHT:
                self.note("photos shown upright as their EXIF orientation says")
            yield self.emit(i, i / src.fps, rgb)


@reads("frames")
class FeedReader(Reader):
    """Frames handed over from Python (`io.source_parts.Feed`): arrays or (array, seconds) pairs, checked."""

    def probe(self) -> None:
        src = self.source
        if src.cfg.uri not in FEEDS:
            raise Sapiens2StreamError(f"{src.cfg.uri}: no such frame feed (python: sources come from the Python API)")
        feed = FEEDS[src.cfg.uri]
        src.fps = src.cfg.fps or feed.fps
        src.total_frames = len(feed.frames) if isinstance(feed.frames, Sized) else None

    def read(self, stop: threading.Event) -> Iterator[Frame]:
        src = self.source
        feed = FEEDS[src.cfg.uri]
        for i, item in enumerate(feed.frames):
            if stop.is_set() or self.limit_reached(i):
                return
            picture, pts = item if isinstance(item, tuple) else (item, i / src.fps)
            picture = np.asarray(picture)
            if picture.ndim == 2:
                picture = np.repeat(picture[..., None], 3, axis=2)
            if picture.ndim != 3 or picture.shape[2] not in (3, 4) or picture.dtype != np.uint8:
                raise Sapiens2StreamError(f"frame {i}: expected an HxWx3 uint8 picture, got {picture.dtype} "
                                          f"{picture.shape}")  # fmt: skip
            picture = picture[..., :3]
            rgb = np.ascontiguousarray(picture[..., ::-1] if feed.bgr else picture)
            yield self.emit(i, float(pts), rgb)


def decoder_used(asked: str, codec) -> str:
    """What a source's `decoder` setting gave once the GPU's decoder was asked for, as its summary says it (once):
    the GPU's, or the CPU's where FFmpeg fell back (the stream's codec not one NVDEC takes)."""
    if codec.is_hwaccel:
        return f"decoded on the GPU (NVDEC, {codec.name})"
    return f"decoded on the CPU: decoder {asked} asked, NVDEC does not take {codec.name}"


def reason(e: BaseException) -> str:
    """An FFmpeg or OS error in a few words."""
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
