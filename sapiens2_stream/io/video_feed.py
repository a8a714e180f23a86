"""A source's encoded video offered to whoever listens from outside (the console's live view, a fleet worker's view
for the driver's console): every picture the recorder draws and every packet it encodes, and the file it writes
now. The recorder only calls `picture` and `packet`; it knows no listener. Listeners subscribe and leave at any
time, from any thread; one that says it is `watched()` makes a source without an annotated video draw and encode
one (`video_sinks.LiveViewSink`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import numpy as np


class VideoListener(Protocol):
    def frame(self, rgb: np.ndarray) -> None: ...

    def packet(self, packet, stream) -> None: ...

    def watched(self) -> bool: ...


class VideoFeed:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listeners: tuple[VideoListener, ...] = ()
        self.recording: Path | None = None  # the video file being written now, if any

    def subscribe(self, listener: VideoListener) -> None:
        with self.lock:
            self.listeners = (*self.listeners, listener)

    def leave(self, listener: VideoListener) -> None:
        with self.lock:
            self.listeners = tuple(x for x in self.listeners if x is not listener)

    def watched(self) -> bool:
        return any(listener.watched() for listener in self.listeners)

    def picture(self, rgb: np.ndarray) -> None:
        for listener in self.listeners:
            listener.frame(rgb)

    def packet(self, packet, stream) -> None:
        for listener in self.listeners:
            listener.packet(packet, stream)
