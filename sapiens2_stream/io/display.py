"""The live window (`outputs.display`) for webcams: the newest result, drawn, at the frame's size.

OpenCV's window runs on Qt, which aborts the whole process (no Python exception, outputs not finalised) when
it cannot reach the X server; so on Linux the display is checked with a real X connection before the run
starts, and a missing or unreachable one is a one-line configuration error.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from .sink import Sink

SYSTEM_FONTS = ("/usr/share/fonts", "/usr/local/share/fonts")


def x_display_problem(display: str | None) -> str | None:
    """Why an X display cannot be used (None when it can): unset, or the connection fails (no server, no access).

    Connects with libxcb itself, the library Qt would use; where libxcb cannot be found nothing is checked."""
    if not display:
        return "there is no display (DISPLAY is unset)"
    name = ctypes.util.find_library("xcb")
    if name is None:
        return None
    xcb = ctypes.CDLL(name)
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    connection = xcb.xcb_connect(display.encode(), None)
    try:
        failed = xcb.xcb_connection_has_error(connection)
    finally:
        xcb.xcb_disconnect(connection)
    return f"cannot connect to the X display {display!r}" if failed else None


class DisplaySink(Sink):
    """A window showing each result as `render` draws it; pressing q or closing the window stops the run.

    The window lives on a thread of its own: GUI toolkits want every call from the same thread (the writes come
    from a pool), and a slow screen must not hold back the other outputs, so the window shows the newest frame
    and skips the ones it had no time for.
    """

    TITLE = "sapiens2-stream"

    def __init__(self, render: Callable[[object], np.ndarray], on_quit: Callable[[], None]) -> None:
        if sys.platform.startswith("linux"):  # OpenCV's Qt talks X (XWayland on Wayland desktops)
            problem = x_display_problem(os.environ.get("DISPLAY"))
            if problem:
                raise Sapiens2StreamError(f"outputs.display is on but {problem}; turn it off")
            if not Path(os.environ.get("QT_QPA_FONTDIR", "")).is_dir():  # OpenCV's wheel points Qt at no fonts
                os.environ["QT_QPA_FONTDIR"] = next((d for d in SYSTEM_FONTS if Path(d).is_dir()), "")
        self.render = render
        self.on_quit = on_quit
        self.newest: queue.Queue[np.ndarray] = queue.Queue(maxsize=1)
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._show, name="display", daemon=True)
        self.thread.start()

    def write(self, result) -> None:
        image = cv2.cvtColor(self.render(result), cv2.COLOR_RGB2BGR)
        with contextlib.suppress(queue.Empty):
            self.newest.get_nowait()  # the window has not shown it yet: the newer frame replaces it
        self.newest.put_nowait(image)

    def _show(self) -> None:
        shown = False
        while not self.closing.is_set():
            with contextlib.suppress(queue.Empty):
                image = self.newest.get(timeout=0.01)
                if not shown:  # the picture alone, at its own size: no toolbar or status bar around it
                    cv2.namedWindow(self.TITLE, cv2.WINDOW_AUTOSIZE | cv2.WINDOW_GUI_NORMAL)
                cv2.imshow(self.TITLE, image)
                shown = True
            if not shown:
                continue
            key = cv2.waitKey(1) & 0xFF  # also runs the window's events
            if key == ord("q") or self._closed():
                self.on_quit()
                break
        cv2.destroyAllWindows()

    def _closed(self) -> bool:
        """The viewer closed the window: hidden, or (OpenCV 5 with Qt) destroyed, when asking about it raises."""
        try:
            return cv2.getWindowProperty(self.TITLE, cv2.WND_PROP_VISIBLE) < 1
        except cv2.error:
            return True

    def close(self) -> None:
        self.closing.set()
        self.thread.join(timeout=5)
