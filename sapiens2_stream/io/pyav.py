"""PyAV, always imported after OpenCV: every module of the package takes `av` from here.

Both wheels bundle xcb extension libraries under the same file names, but PyAV's are linked to a libxcb of its
own: loaded first, they are what OpenCV's Qt window later binds to, and the display window (outputs.display)
hangs on its first frame. Loaded in this order, both work (tests/test_display). Done here rather than when the
package is imported, so that `--help`, `validate` and `schema` do not pay for OpenCV.
"""

import cv2  # noqa: F401, I001  (first: the order is the point, an import sorter must leave it)
import av

__all__ = ["av"]
