"""`outputs.virtual_camera`: the composite (the matte over its background, else the annotated picture) as a webcam
that video-call software can pick, through pyvirtualcam (v4l2loopback on Linux, OBS Virtual Camera on Windows and
macOS).

The camera is fed from a thread of its own at the camera's rate: each tick sends the newest picture (again, when no
new one came: a camera must keep its pace), so a slow or stalled camera consumer never holds back the pipeline, and
a fast pipeline never floods the camera.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..config import (
    DEFAULT_FPS,
)
from ..errors import Sapiens2StreamError
from .sink import Sink

LINUX_SETUP = ("load v4l2loopback (sudo apt install v4l2loopback-dkms; sudo modprobe v4l2loopback devices=1 "
               "exclusive_caps=1)")  # fmt: skip


def open_camera_module(backend: str):
    """pyvirtualcam, after checking that a virtual camera can exist here: one line naming what to install if not."""
    try:
        import pyvirtualcam
    except ImportError:
        raise Sapiens2StreamError("outputs.virtual_camera needs pyvirtualcam: pip install "
                                  "'sapiens2-stream[virtualcam]'") from None  # fmt: skip
    if backend != "auto" and backend not in pyvirtualcam.camera.BACKENDS:
        known = ", ".join(sorted(pyvirtualcam.camera.BACKENDS)) or "none"
        raise Sapiens2StreamError(f"outputs.virtual_camera.backend {backend!r} is not available here ({known})")
    if backend in ("auto", "v4l2loopback") and sys.platform.startswith("linux") and not loopback_devices():
        raise Sapiens2StreamError(f"outputs.virtual_camera: no virtual camera device on this machine: "
                                  f"{LINUX_SETUP}")  # fmt: skip
    return pyvirtualcam


def loopback_devices() -> list[str]:
    """The v4l2loopback devices of this Linux machine (virtual video4linux devices)."""
    return sorted(f"/dev/{p.name}" for p in Path("/sys/devices/virtual/video4linux").glob("video*"))


class VirtualCameraSink(Sink):
    """Sends `render(result)` to a virtual camera opened at the first picture's size."""

    kind = "virtual_camera"

    def __init__(self, render: Callable[[object], np.ndarray], fps: Callable[[], float], device: str,
                 backend: str) -> None:  # fmt: skip
        """`fps()`: the camera's rate, asked at the first picture (a live source says its rate once open)."""
        self.camera_module = open_camera_module(backend)
        self.render, self.fps = render, fps
        self.device = None if device == "auto" else device
        self.backend = None if backend == "auto" else backend
        self.newest: queue.Queue[np.ndarray] = queue.Queue(maxsize=1)
        self.closing = threading.Event()
        self.error: Exception | None = None
        self.counts = {"pictures": 0, "sent": 0, "repeated": 0, "replaced": 0}
        self.thread = threading.Thread(target=self._feed, name="virtual-camera", daemon=True)
        self.thread.start()

    def write(self, result) -> None:
        picture = self.render(result)
        self.counts["pictures"] += 1
        with contextlib.suppress(queue.Empty):
            self.newest.get_nowait()  # not sent yet: the newer picture replaces it
            self.counts["replaced"] += 1
        self.newest.put_nowait(picture)

    def _feed(self) -> None:
        try:
            picture = None
            while picture is None and not self.closing.is_set():
                with contextlib.suppress(queue.Empty):
                    picture = self.newest.get(timeout=0.05)
            if picture is None:
                return
            h, w = picture.shape[:2]
            with self.camera_module.Camera(w, h, self.fps(), device=self.device, backend=self.backend) as camera:
                while not self.closing.is_set():
                    try:
                        picture, fresh = self.newest.get_nowait(), True
                    except queue.Empty:
                        fresh = False
                    if picture.shape[:2] != (h, w):  # the source changed size: keep the camera's
                        import cv2

                        picture = cv2.resize(picture, (w, h), interpolation=cv2.INTER_AREA)
                    camera.send(np.ascontiguousarray(picture))
                    self.counts["sent"] += 1
                    self.counts["repeated"] += not fresh
                    camera.sleep_until_next_frame()
        except Exception as e:  # a camera that cannot be opened or fails: said once, the run goes on
            self.error = e
            print(f"sapiens2-stream: virtual camera stopped: {e}", file=sys.stderr)

    def close(self) -> None:
        self.closing.set()
        self.thread.join(timeout=5)

    def stats(self) -> dict:
        return {**self.counts, "error": None if self.error is None else str(self.error)}


def camera_fps(setting: float | str, source_fps: float | None) -> float:
    """`fps: auto` is the source's rate (30 when it does not say)."""
    return float(source_fps or DEFAULT_FPS) if setting == "auto" else float(setting)
