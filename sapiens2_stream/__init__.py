"""sapiens2-stream: Meta's Sapiens2 models on video files, RTSP cameras and webcams."""

# OpenCV before PyAV, always. Both wheels bundle xcb extension libraries under the same file names, but PyAV's
# are linked to a libxcb of its own: loaded first, they are what OpenCV's Qt window later binds to, and the
# display window (outputs.display) hangs on its first frame. Loaded in this order, both work (tests/test_display).
import cv2  # noqa: F401

API = ("stream", "astream", "run", "predict", "Sapiens2", "Result")  # the Python API (sapiens2_stream.api)


def __getattr__(name: str):
    """`sapiens2_stream.stream(...)` and the rest of the API, imported on first use (torch loads then, not when the
    package is imported)."""
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'sapiens2_stream' has no attribute {name!r}")
