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


def counters(stream) -> dict:
    """A stream's running counts, as a pipeline's console shows them and a fleet worker reports them."""
    return {
        "frames_in": stream.source.stats.frames, "frames_out": stream.metrics.frames_out,
        "dropped": dict(stream.dropped), "reconnects": stream.source.stats.reconnects,
        "last_frame": stream.last_frame, "people": stream.last_people,
    }  # fmt: skip


def source_status(name: str, uri: str, state: str, counts: dict, rates: Rates, result_age_s: float | None) -> dict:
    """One source as `/api/v1/sources` lists it; the same shape from one pipeline and from a fleet's driver, which
    adds where the camera runs. `counts`: as `counters` gives them (a camera not reported yet: empty)."""
    fps_in, fps_written = rates.of(name)
    return {
        "name": name, "uri": uri, "state": state, "fps_in": fps_in, "fps_written": fps_written,
        "frames_in": counts.get("frames_in", 0), "frames_out": counts.get("frames_out", 0),
        "dropped": counts.get("dropped", {}), "reconnects": counts.get("reconnects", 0),
        "last_result_age_s": None if result_age_s is None else round(result_age_s, 3),
        "last_frame": counts.get("last_frame"), "people": counts.get("people", 0),
    }  # fmt: skip


def describe(stream, rates: Rates) -> dict:
    """A source of this pipeline as the console lists it."""
    age = None if stream.last_written is None else time.time() - stream.last_written
    return source_status(stream.name, without_credentials(stream.cfg.source.uri), state(stream), counters(stream),
                         rates, age)  # fmt: skip
