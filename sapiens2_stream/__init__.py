"""sapiens2-stream: Meta's Sapiens2 models on video files, RTSP cameras and webcams."""

# OpenCV before PyAV, always. Both wheels bundle xcb extension libraries under the same file names, but PyAV's
# are linked to a libxcb of its own: loaded first, they are what OpenCV's Qt window later binds to, and the
# display window (outputs.display) hangs on its first frame. Loaded in this order, both work (tests/test_display).
import cv2  # noqa: F401
