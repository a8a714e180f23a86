"""What the console says of a source: state, rates, counters, as JSON (`/api/v1/sources`)."""

from __future__ import annotations

import time
from collections import deque
from urllib.parse import urlsplit, urlunsplit

RATE_WINDOW_S = 5.0  # frames/s in and written are measured over this many seconds


def without_credentials(uri: str) -> str:
    """The URI with any user name and password removed (rtsp://user:pass@host/... -> rtsp://host/...)."""
    parts = urlsplit(uri)
    if not parts.netloc or "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


class Rates:
    """Frames/s in and written of each source, from its counters sampled once a second."""

    def __init__(self) -> None:
        self.samples: dict[str, deque] = {}

    def sample(self, counts: dict[str, tuple[int, int]]) -> None:
        """`counts`: per source, its frames in and written so far."""
        now = time.monotonic()
        for name, (frames_in, frames_out) in counts.items():
            history = self.samples.setdefault(name, deque())
            history.append((now, frames_in, frames_out))
            while len(history) > 2 and now - history[1][0] >= RATE_WINDOW_S:
                history.popleft()

    def of(self, name: str) -> tuple[float, float]:
        history = self.samples.get(name)
        if not history or len(history) < 2:
            return 0.0, 0.0
        (t0, in0, out0), (t1, in1, out1) = history[0], history[-1]
        span = max(t1 - t0, 1e-9)
        return round((in1 - in0) / span, 2), round((out1 - out0) / span, 2)


def state(stream) -> str:
    """live, reconnecting (a live source waiting for its camera to come back), ended or failed."""
    if stream.error is not None:
        return "failed"
    if stream.closed or not stream.reading:
        return "ended"
    return "reconnecting" if stream.disconnected else "live"


def describe(stream, rates: Rates) -> dict:
    fps_in, fps_written = rates.of(stream.name)
    now = time.time()
    return {
        "name": stream.name, "uri": without_credentials(stream.cfg.source.uri), "state": state(stream),
        "fps_in": fps_in, "fps_written": fps_written, "frames_in": stream.source.stats.frames,
        "frames_out": stream.metrics.frames_out, "dropped": dict(stream.dropped),
        "reconnects": stream.source.stats.reconnects,
        "last_result_age_s": None if stream.last_written is None else round(now - stream.last_written, 3),
        "last_frame": stream.last_frame, "people": stream.last_people,
    }  # fmt: skip
