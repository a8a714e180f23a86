"""The kinds of input (`source.kind`, `sapiens2-stream list sources`), one registry: `registry.SOURCES`.

Light on purpose (no PyAV, no OpenCV): reading a pipeline file checks `source.kind` against these names, and
`auto` is resolved from them. How each kind's frames are read is its reader class (`io.readers`), registered for
it here (`reads`, `READERS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import Sapiens2StreamError
from ..registry import SOURCES, Row
from .options import SourceConfig

STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "rtmps://", "http://", "https://", "udp://", "tcp://", "srt://")
Opening = tuple[str, str | None, dict[str, str]]  # what FFmpeg opens: (target, format, options)


def plain_opening(cfg: SourceConfig) -> Opening:
    """What FFmpeg opens for a file: the URI itself, its format found by probing, no options."""
    return cfg.uri, None, {}


def stream_opening(cfg: SourceConfig) -> Opening:
    rtsp = cfg.uri.startswith(("rtsp://", "rtsps://"))
    return cfg.uri, None, {"rtsp_transport": cfg.transport} if rtsp else {}


def webcam_opening(cfg: SourceConfig) -> Opening:
    return webcam_input(cfg.uri, width=cfg.width, height=cfg.height, fps=cfg.fps)


def lavfi_opening(cfg: SourceConfig) -> Opening:
    return cfg.uri.removeprefix("lavfi:"), "lavfi", {}


def webcam_input(
    device: str, platform: str = sys.platform, width: int | None = None, height: int | None = None,
    fps: float | None = None,
) -> tuple[str, str, dict[str, str]]:  # fmt: skip
    """(file, format, options) to open a webcam with FFmpeg on this platform.

    `device` is an index ("0"), a path (/dev/video2) or a name (Windows dshow: "Integrated Camera").
    """
    device = device.removeprefix("webcam:") or "0"
    options: dict[str, str] = {}
    if width and height:
        options["video_size"] = f"{width}x{height}"
    if fps:
        options["framerate"] = f"{fps:g}"
    if platform.startswith("linux"):
        return (f"/dev/video{device}" if device.isdigit() else device), "v4l2", options
    if platform == "darwin":
        options.setdefault("framerate", "30")  # avfoundation refuses to open without a rate
        return (f"{device}:none" if device.isdigit() else device), "avfoundation", options
    if platform.startswith("win"):
        return f"video={device}", "dshow", options
    raise Sapiens2StreamError(f"webcams are not supported on {platform}; use a stream URL or a file")


@dataclass(frozen=True)
class SourceKind:
    """A kind of input: whether it is live (frames may be dropped, it reconnects), the URIs it claims under `auto`,
    and what FFmpeg opens for it. Its reader (`READERS`) learns about it before the run and reads its frames."""

    name: str
    live: bool
    doc: str
    claims: Callable[[str], bool]
    opening: Callable[[SourceConfig], Opening] = plain_opening

    def listing(self) -> Row:
        return self.name, "live" if self.live else "whole", "take stage", "source", self.doc


# The kinds of input; `auto` takes the first that claims the URI, so the order matters (a file is what is left).
SOURCES.add(SourceKind("frames", False, "frames handed over from Python (the API's stream() of arrays or a generator)",
                       lambda uri: uri.startswith("python:")))  # fmt: skip
SOURCES.add(SourceKind("stream", True,
                       "a network camera or stream: rtsp(s)://, rtmp(s)://, http(s)://, srt://, udp://, tcp://",
                       lambda uri: uri.startswith(STREAM_SCHEMES), stream_opening))  # fmt: skip
SOURCES.add(
    SourceKind(
        "webcam",
        True,
        "a local camera: webcam:0, /dev/video0, a device name on Windows",
        lambda uri: uri.startswith(("webcam:", "/dev/video")) or uri.isdigit(),
        webcam_opening,
    )
)
SOURCES.add(SourceKind("lavfi", True,
                       "an FFmpeg filter graph standing in for a camera: lavfi:testsrc2=size=640x360:rate=30",
                       lambda uri: uri.startswith("lavfi:"), lavfi_opening))  # fmt: skip
SOURCES.add(
    SourceKind(
        "images",
        False,
        "a folder or glob of photos, in name order (EXIF orientation applied)",
        lambda uri: any(c in uri for c in "*?[") or Path(uri).is_dir(),
    )
)
SOURCES.add(
    SourceKind(
        "file", False, "a video file (mp4, mkv, mov, ...): nothing dropped, --resume continues it", lambda uri: True
    )
)


READERS: dict[str, type] = {}  # kind -> its reader class (`io.readers`, each registered with `reads`)


def reads(*kinds: str) -> Callable[[type], type]:
    """Class decorator: the reader of the kinds `kinds` (their `Source`s read with it)."""

    def register(cls: type) -> type:
        for kind in kinds:
            READERS[kind] = cls
        return cls

    return register


def resolve_kind(uri: str) -> str:
    """The kind `source.kind: auto` takes for a URI: the first registered that claims it."""
    return next(kind.name for kind in SOURCES.values() if kind.claims(uri))


def source_kind(cfg: SourceConfig) -> SourceKind:
    """The configured kind, or the one the URI implies when it is "auto"."""
    return SOURCES[cfg.kind if cfg.kind != "auto" else resolve_kind(cfg.uri)]
