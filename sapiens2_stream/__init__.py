"""sapiens2-stream: Meta's Sapiens2 models on video files, RTSP cameras and webcams."""

# OpenCV before PyAV, always: every module takes `av` from io/pyav.py, which imports OpenCV first.

# the Python API (sapiens2_stream.api)
API = ("stream", "astream", "run", "predict", "Sapiens2", "Result", "GroupMoment")


def __getattr__(name: str):
    """`sapiens2_stream.stream(...)` and the rest of the API, imported on first use (torch loads then, not when the
    package is imported)."""
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'sapiens2_stream' has no attribute {name!r}")
