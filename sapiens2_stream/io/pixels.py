"""Pictures into and out of FFmpeg without threads made per picture.

PyAV converts pixel formats with swscale, whose default (`threads=0`: automatic) gives every conversion context a
pool of threads that lives and dies with the frame: dozens of threads made and joined for each decoded or encoded
picture (measured with PyAV 18 / FFmpeg 8: one 320x240 decode to RGB took a process from 4 to 45 threads, and a
run's thread count swung between 60 and 170 all the time). Conversions here run on the caller's thread, which is
already one of the run's long-lived threads (a source's reader or writer).
"""

from __future__ import annotations

import numpy as np

from .pyav import av

SCALE_THREADS = 1  # swscale threads per conversion: the caller's own


def rgb_of(frame: av.VideoFrame) -> np.ndarray:
    """A decoded frame as HxWx3 uint8 RGB."""
    return frame.to_ndarray(format="rgb24", threads=SCALE_THREADS)


def encodable(rgb: np.ndarray, stream) -> av.VideoFrame:
    """An RGB picture as a frame in the encoder's own pixel format (so the encoder converts nothing itself)."""
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    return frame.reformat(format=stream.pix_fmt, threads=SCALE_THREADS)
