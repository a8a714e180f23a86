"""`outputs.stream`: the annotated video, live, to a media server: FLV over RTMP (nginx-rtmp, MediaMTX, SRS,
YouTube) or RTSP RECORD (MediaMTX). H.264 at the frame's size, `zerolatency`, a keyframe every second, so a viewer
joins within a second.

The server is never waited for: frames go through a small queue to a thread of the sink's own; while the server
is away (refused, dropped, stalled past `rw_timeout`) the thread reconnects with doubling backoff and the frames
it could not send are dropped, counted, for the stream only; files and the other outputs go on untouched.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from ..config import (
    DEFAULT_FPS,
)
from ..errors import redact
from .backoff import Backoff
from .options import StreamOutput
from .pixels import encodable
from .pyav import av
from .sink import Sink

TIME_BASE = Fraction(1, 1000)  # FLV's
RW_TIMEOUT_S = 5.0  # a server that stops reading for this long counts as gone


class RestreamSink(Sink):
    kind = "stream"

    def __init__(self, url: str, fps: float | None, cfg: StreamOutput, render: Callable[[object], np.ndarray]) -> None:
        self.url, self.cfg, self.render = url, cfg, render
        self.fps = fps or DEFAULT_FPS
        self.frames: queue.Queue[tuple[np.ndarray, float]] = queue.Queue(cfg.queue)
        self.sent = self.dropped = self.connections = 0
        self.events: list[str] = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._run, name="restream", daemon=True)
        self.thread.start()

    def write(self, result) -> None:
        try:
            self.frames.put_nowait((self.render(result), result.frame.pts_s))
        except queue.Full:
            self.dropped += 1

    # ------------------------------------------------------------------------------------------- sending

    def _next(self) -> tuple[np.ndarray, float] | None:
        while not self.closing.is_set() or not self.frames.empty():
            try:
                return self.frames.get(timeout=0.1)
            except queue.Empty:
                continue
        return None

    def _open(self, width: int, height: int):
        if self.url.startswith(("rtsp://", "rtsps://")):
            fmt, options = "rtsp", {"rtsp_transport": self.cfg.transport}
        else:
            fmt, options = "flv", {"rw_timeout": str(int(RW_TIMEOUT_S * 1e6))}
        container = av.open(self.url, "w", format=fmt, options=options, timeout=RW_TIMEOUT_S)
        gop = max(1, round(self.fps))
        stream = container.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1001), options={
            "preset": "veryfast", "tune": "zerolatency", "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0",
        })  # fmt: skip
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.bit_rate = self.cfg.bitrate_kbps * 1000
        stream.codec_context.time_base = TIME_BASE
        return container, stream

    def _session(self, first: tuple[np.ndarray, float]) -> None:
        """One connection: send frames until the server fails or the run ends."""
        image, start = first
        h, w = (s - s % 2 for s in image.shape[:2])
        container, stream = self._open(w, h)
        self.connections += 1
        last = -1
        try:
            item = first
            while item is not None:
                image, pts_s = item
                frame = encodable(image[:h, :w], stream)
                frame.pts = max(int(round((pts_s - start) / TIME_BASE)), last + 1)  # each connection starts at 0
                frame.time_base = TIME_BASE
                last = frame.pts
                for packet in stream.encode(frame):
                    container.mux(packet)
                self.sent += 1
                item = self._next()
        finally:
            try:
                container.close()
            except (av.FFmpegError, OSError):
                pass

    def _run(self) -> None:
        backoff = Backoff(self.cfg.reconnect.initial_s, self.cfg.reconnect.max_s)
        while True:
            item = self._next()
            if item is None:
                return
            sent = self.sent
            try:
                self._session(item)
                return  # the run ended
            except (av.FFmpegError, OSError, ValueError) as e:
                self.dropped += 1  # the frame being sent
                self.events.append(redact(f"stream {self.url}: {getattr(e, 'strerror', None) or e}; reconnecting"))
            if self.sent > sent:  # it was connected: start the backoff again
                backoff.reset()
            deadline = time.monotonic() + backoff.next()
            while time.monotonic() < deadline and not self.closing.is_set():  # the server is away: drop, count
                try:
                    self.frames.get(timeout=0.05)
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self) -> None:
        self.closing.set()
        self.thread.join(timeout=10)

    def stats(self) -> dict:
        return {"sent": self.sent, "dropped": self.dropped, "connections": self.connections,
                "events": self.events[-5:]}  # fmt: skip
