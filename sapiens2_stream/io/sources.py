"""Frame sources through PyAV: video files, RTSP/RTMP/HTTP streams, webcams, lavfi test sources, image folders.

Every frame keeps its index, its presentation time in seconds and the wall time it arrived. Live sources
(streams, webcams, lavfi) connect on their own and reconnect with exponential backoff: a camera that is down when
the run starts is tried again while the others run, a dropped camera is a gap, counted, not a crash. Their
timestamps stay monotonic across reconnects (wall-clock offset per connection). A live source's `connection`
says where it stands (connecting, live, reconnecting, gave_up; why the latest attempt failed; when the next is).

`Source` holds one input's state (its counters, the connection, what was learnt before the run); how its kind is
read is its reader's (`io.readers`: a class per kind, registered for it in `io.source_kinds`, with what every kind's
reading shares: opening, decoding, a frame made upright and counted).
"""

from __future__ import annotations

from ..errors import Sapiens2StreamError, redact
from . import readers  # noqa: F401  (every kind's reader registers itself for its kind)
from .options import SourceConfig
from .source_kinds import READERS, source_kind
from .source_parts import (
    FEEDS,
    Connection,
    Feed,
    Frame,
    SourceStats,
    forget_feed,
    image_paths,
    read_image,
    register_feed,
    video_devices,
)

__all__ = ["FEEDS", "Connection", "Feed", "Frame", "Source", "SourceStats", "forget_feed", "image_paths", "read_image",
           "register_feed", "video_devices"]  # fmt: skip


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
        self.reader = READERS[self.kind](self)  # how its kind is read (`io.readers`)
        self.reader.probe()
        self.frames = self.reader.frames  # all frames, in order; a live one reconnects until stopped (`Reader.frames`)
        if self.total_frames is not None and cfg.max_frames is not None:
            self.total_frames = min(self.total_frames, cfg.max_frames)

    def connect(self) -> None:
        """A live source tries its camera once before the run, for its nominal frame rate (planning); a camera that
        is down is said (one line) and left to the reader, which keeps trying while the other sources run. Other
        kinds have nothing to do."""
        if not self.live:
            return
        reader = self.reader
        try:
            container = reader.open()
        except Sapiens2StreamError as e:
            reader.failed(str(e), self.cfg.reconnect.initial_s)
            return
        with container:
            reader.learn_rate(container)

    @property
    def label(self) -> str:
        """The source's name, else its URI (password redacted), for lines about it."""
        return self.cfg.name or self.source_id

    @property
    def source_id(self) -> str:
        """The URI as outputs name it (its password redacted)."""
        return redact(self.cfg.uri)
